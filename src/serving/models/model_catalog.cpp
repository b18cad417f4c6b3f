#include "serving/models/model_catalog.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "core/error.h"

namespace kestrel {
namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// -0000N-of-0000M.gguf with N > 1: a shard the first one names.
bool later_shard(const std::string& file) {
  static const std::regex shard("-([0-9]{5})-of-[0-9]{5}\\.gguf$");
  std::smatch m;
  return std::regex_search(file, m, shard) && std::stoi(m[1].str()) > 1;
}

// The name of a split model's first shard without its shard suffix.
std::string without_shard(const std::string& stem) {
  static const std::regex first("-00001-of-[0-9]{5}$");
  return std::regex_replace(stem, first, "");
}

bool draft_file(const std::string& file) {
  return file.rfind("mtp-", 0) == 0 || file.rfind("dspark-", 0) == 0 || file.rfind("dflash-", 0) == 0;
}

std::string strip_blanks(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

}  // namespace

std::vector<ModelSpec> scan_models_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw Error(fmt::format("--models-dir {}: not a folder", dir));
  std::vector<fs::directory_entry> entries;
  for (const auto& e : fs::directory_iterator(dir, ec)) entries.push_back(e);
  if (ec) throw Error(fmt::format("--models-dir {}: {}", dir, ec.message()));
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.path() < b.path(); });
  std::vector<ModelSpec> out;
  for (const auto& e : entries) {
    const std::string file = e.path().filename().string();
    if (file.empty() || file[0] == '.') continue;
    if (e.is_regular_file() && ends_with(file, ".gguf")) {
      if (file.find("mmproj") != std::string::npos || later_shard(file) || draft_file(file)) continue;
      ModelSpec s;
      s.name = without_shard(e.path().stem().string());
      s.path = e.path().string();
      out.push_back(std::move(s));
    } else if (e.is_directory()) {
      ModelSpec s;
      s.name = file;
      std::vector<std::string> models;
      for (const auto& inner : fs::directory_iterator(e.path(), ec)) {
        const std::string f = inner.path().filename().string();
        if (!inner.is_regular_file() || !ends_with(f, ".gguf")) continue;
        if (f.find("mmproj") != std::string::npos) {
          if (!s.mmproj.empty())
            throw Error(fmt::format("--models-dir: {} holds two projectors ({} and {})", e.path().string(),
                                    fs::path(s.mmproj).filename().string(), f));
          s.mmproj = inner.path().string();
        } else if (!later_shard(f) && !draft_file(f)) {
          models.push_back(inner.path().string());
        }
      }
      if (models.empty()) continue;  // (a folder of something else)
      if (models.size() > 1) {
        std::sort(models.begin(), models.end());
        throw Error(fmt::format("--models-dir: {} holds {} models ({}); a model's folder holds one (and its "
                                "projector, shards)",
                                e.path().string(), models.size(), fmt::join(models, ", ")));
      }
      s.path = models.front();
      out.push_back(std::move(s));
    }
  }
  return out;
}

PresetFile read_preset_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(fmt::format("--models-preset {}: cannot be read", path));
  PresetFile out;
  std::vector<std::pair<std::string, std::string>>* keys = nullptr;  // the section being read
  std::set<std::string> sections;
  std::string line;
  int n = 0;
  const auto fail = [&](const std::string& why) { throw Error(fmt::format("{}:{}: {}", path, n, why)); };
  while (std::getline(in, line)) {
    n++;
    // A value continued on the next line.
    while (!line.empty() && line.back() == '\\') {
      std::string more;
      line.pop_back();
      if (!std::getline(in, more)) break;
      n++;
      line += "\n" + more;
    }
    const std::string t = strip_blanks(line);
    if (t.empty() || t[0] == ';' || t[0] == '#') continue;
    if (t.front() == '[') {
      if (t.back() != ']') fail("a section header is [name]");
      const std::string name = strip_blanks(t.substr(1, t.size() - 2));
      if (name.empty()) fail("a section needs a name");
      if (!sections.insert(name).second) fail(fmt::format("section [{}] again", name));
      if (name == "*") {
        keys = &out.global;
      } else {
        out.models.push_back({name, n, {}});
        keys = &out.models.back().keys;
      }
      continue;
    }
    const size_t eq = t.find('=');
    if (eq == std::string::npos) fail(fmt::format("'{}' is not key = value", t));
    const std::string key = strip_blanks(t.substr(0, eq)), value = strip_blanks(t.substr(eq + 1));
    if (key.empty()) fail("a key is missing before '='");
    if (!keys) {
      if (key != "version") fail(fmt::format("key '{}' outside a section (only 'version' may be)", key));
      if (value != "1") fail(fmt::format("version {} is not one this server reads (1)", value));
      continue;
    }
    for (const auto& [k, v] : *keys)
      if (k == key) fail(fmt::format("key '{}' twice in one section", key));
    keys->emplace_back(key, value);
  }
  return out;
}

bool preset_bool(const std::string& value, const std::string& what) {
  std::string v = value;
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v == "true" || v == "1" || v == "yes" || v == "on") return true;
  if (v == "false" || v == "0" || v == "no" || v == "off") return false;
  throw Error(fmt::format("{}: '{}' is not true or false", what, value));
}

}  // namespace kestrel

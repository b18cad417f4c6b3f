#include "runtime/profiler.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace kestrel {

Profiler::Profiler() : origin_(std::chrono::steady_clock::now()) { events_.reserve(1 << 16); }

int64_t Profiler::now_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - origin_).count();
}

void Profiler::record(ProfileEvent e) {
  std::lock_guard lock(mutex_);
  events_.push_back(std::move(e));
}

void Profiler::write_chrome_trace(const std::string& path) const {
  nlohmann::json events = nlohmann::json::array();
  for (const auto& e : events_) {
    events.push_back({{"name", e.op}, {"cat", e.layer >= 0 ? "layer" : "head"}, {"ph", "X"},
                      {"ts", static_cast<double>(e.start_ns) / 1000.0}, {"dur", static_cast<double>(e.dur_ns) / 1000.0},
                      {"pid", 1}, {"tid", e.layer >= 0 ? 1 : 0},
                      {"args", {{"layer", e.layer}, {"bytes", e.bytes}, {"flops", e.flops}}}});
  }
  const nlohmann::json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"},
                              {"otherData", {{"producer", "kestrel"}}}};
  std::ofstream out(path);
  if (!out) throw Error(fmt::format("{}: cannot write the profile", path));
  out << doc.dump() << "\n";
  if (!out) throw Error(fmt::format("{}: write failed", path));
}

std::vector<ProfileEvent> read_chrome_trace(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(fmt::format("{}: cannot read the profile", path));
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}: not a JSON trace: {}", path, e.what()));
  }
  if (!doc.contains("traceEvents") || !doc["traceEvents"].is_array())
    throw Error(fmt::format("{}: no 'traceEvents' array (not a Chrome trace)", path));
  std::vector<ProfileEvent> out;
  for (const auto& j : doc["traceEvents"]) {
    if (j.value("ph", "") != "X") continue;
    ProfileEvent e;
    e.op = j.value("name", "?");
    e.start_ns = static_cast<int64_t>(j.value("ts", 0.0) * 1000.0);
    e.dur_ns = static_cast<int64_t>(j.value("dur", 0.0) * 1000.0);
    if (j.contains("args")) {
      const auto& a = j["args"];
      e.layer = a.value("layer", -1);
      e.bytes = a.value("bytes", 0.0);
      e.flops = a.value("flops", 0.0);
    }
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace kestrel

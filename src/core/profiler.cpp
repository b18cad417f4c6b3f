#include "core/profiler.h"

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

void Profiler::record_expert_load(int layer, int n_expert, const int32_t* ids, int64_t n) {
  std::lock_guard lock(mutex_);
  auto& counts = expert_load_[layer];
  counts.resize(static_cast<size_t>(n_expert));
  for (int64_t i = 0; i < n; i++)
    if (ids[i] >= 0 && ids[i] < n_expert) counts[ids[i]]++;
}

void Profiler::write_chrome_trace(const std::string& path) const {
  nlohmann::json events = nlohmann::json::array();
  const int pid = rank_ + 1;
  // Named tracks: the head (embedding, output), the layers, and transfers in flight.
  const char* names[3] = {"head", "layers", "communication"};
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", fmt::format("rank {}", rank_)}}}});
  for (int t = 0; t < 3; t++)
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", t}, {"args", {{"name", names[t]}}}});
  for (const auto& e : events_) {
    const bool comm = e.track == "communication";
    events.push_back({{"name", e.op}, {"cat", comm ? "communication" : e.layer >= 0 ? "layer" : "head"}, {"ph", "X"},
                      {"ts", static_cast<double>(e.start_ns) / 1000.0}, {"dur", static_cast<double>(e.dur_ns) / 1000.0},
                      {"pid", pid}, {"tid", comm ? 2 : e.layer >= 0 ? 1 : 0},
                      {"args", {{"layer", e.layer}, {"bytes", e.bytes}, {"flops", e.flops}}}});
  }
  nlohmann::json other = {{"producer", "kestrel"}};
  if (!expert_load_.empty()) {
    nlohmann::json load = nlohmann::json::object();
    for (const auto& [layer, counts] : expert_load_) load[std::to_string(layer)] = counts;
    other["expert_load"] = load;  // tokens routed to each expert, per layer
  }
  const nlohmann::json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"}, {"otherData", other}};
  std::ofstream out(path);
  if (!out) throw Error(fmt::format("{}: cannot write the profile", path));
  out << doc.dump() << "\n";
  if (!out) throw Error(fmt::format("{}: write failed", path));
}

namespace {

nlohmann::json read_trace_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(fmt::format("{}: cannot read the profile", path));
  try {
    return nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}: not a JSON trace: {}", path, e.what()));
  }
}

}  // namespace

std::map<int, std::vector<int64_t>> read_expert_load(const std::string& path) {
  const nlohmann::json doc = read_trace_json(path);
  std::map<int, std::vector<int64_t>> load;
  if (!doc.contains("otherData") || !doc["otherData"].contains("expert_load")) return load;
  try {
    for (const auto& [layer, counts] : doc["otherData"]["expert_load"].items())
      load[std::stoi(layer)] = counts.get<std::vector<int64_t>>();
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}: malformed expert_load: {}", path, e.what()));
  }
  return load;
}

std::vector<ProfileEvent> read_chrome_trace(const std::string& path) {
  const nlohmann::json doc = read_trace_json(path);
  if (!doc.contains("traceEvents") || !doc["traceEvents"].is_array())
    throw Error(fmt::format("{}: no 'traceEvents' array (not a Chrome trace)", path));
  std::vector<ProfileEvent> out;
  for (const auto& j : doc["traceEvents"]) {
    if (j.value("ph", "") != "X") continue;
    ProfileEvent e;
    e.op = j.value("name", "?");
    e.start_ns = static_cast<int64_t>(j.value("ts", 0.0) * 1000.0);
    e.dur_ns = static_cast<int64_t>(j.value("dur", 0.0) * 1000.0);
    if (j.value("cat", "") == "communication") e.track = "communication";
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

#pragma once
// Per-operator timing: every backend call becomes one event (operator,
// layer, start, duration, bytes moved, FLOPs), written as a Chrome trace
// that loads in Perfetto / chrome://tracing.
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace kestrel {

struct ProfileEvent {
  std::string op;      // "matmul attn_q", "attention", "rmsnorm", ...
  int layer = -1;      // -1: outside the layers (embedding, output head)
  int64_t start_ns = 0, dur_ns = 0;
  double bytes = 0, flops = 0;
  // "" : the rank's own time (operators, and the waits for communication);
  // "communication": a transfer in flight (concurrent with the former).
  std::string track;
};

class Profiler {
 public:
  Profiler();
  int64_t now_ns() const;
  // Under --parallel: whose trace this is (its events get process rank + 1,
  // so that the ranks' traces open side by side in Perfetto).
  void set_rank(int rank) { rank_ = rank; }
  void record(ProfileEvent e);
  const std::vector<ProfileEvent>& events() const { return events_; }
  // MoE routing decisions: the n expert ids chosen in one step of a layer.
  void record_expert_load(int layer, int n_expert, const int32_t* ids, int64_t n);
  // Tokens routed to each expert, per layer (written into the trace's otherData).
  const std::map<int, std::vector<int64_t>>& expert_load() const { return expert_load_; }
  void write_chrome_trace(const std::string& path) const;  // throws Error naming the path

 private:
  std::chrono::steady_clock::time_point origin_;
  std::vector<ProfileEvent> events_;
  std::map<int, std::vector<int64_t>> expert_load_;
  std::mutex mutex_;
  int rank_ = 0;
};

// Events back from a Chrome trace written by write_chrome_trace (for reports).
std::vector<ProfileEvent> read_chrome_trace(const std::string& path);
// The expert load recorded in such a trace (empty for dense models).
std::map<int, std::vector<int64_t>> read_expert_load(const std::string& path);

}  // namespace kestrel

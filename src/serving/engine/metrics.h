#pragma once
// The server's metrics in Prometheus' text exposition format (version
// 0.0.4): counters end in _total, durations are histograms in seconds, one
// HELP and TYPE line per family. Thread-safe: the engine thread records,
// HTTP threads render.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace kestrel {

class ServerMetrics {
 public:
  // model_name: a model_name="..." label on every series (none when empty).
  explicit ServerMetrics(const std::string& model_name = "");

  void observe(const std::string& histogram, double seconds);
  void add(const std::string& counter, double v = 1.0, const std::string& label = "");
  void set(const std::string& gauge, double v);
  std::string render() const;
  // A counter's current value (0 before the first add), for in-process readers.
  double counter(const std::string& name, const std::string& label = "") const;

 private:
  struct Histogram {
    std::string help;
    std::vector<double> bounds;
    std::vector<uint64_t> counts;  // per bucket (not cumulative), last = +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  struct Family {
    std::string help, label_name;
    std::map<std::string, double> values;  // label value ("" for none) -> value
  };
  std::string model_label_;
  mutable std::mutex mutex_;
  std::map<std::string, Histogram> histograms_;
  std::map<std::string, Family> counters_, gauges_;
};

}  // namespace kestrel

#pragma once
// llama-bench-style measurements: prefill of n_prompt tokens ("pp") and
// decode of n_gen tokens ("tg"), repeated, with the roofline each is held to.
#include <cstdint>
#include <string>
#include <vector>

#include "hw/limits.h"
#include "runtime/loaded_model.h"
#include "measure/model_cost.h"

namespace kestrel {

struct BenchTest {
  std::string name;  // "pp512", "tg128" or "tg128@d16384"
  int64_t n_prompt = 0, n_gen = 0;
  int64_t depth = 0;  // decode: tokens already in the context before the timed steps (llama-bench's -d)
};

struct BenchResult {
  std::string model_filename, model_type;
  int64_t model_size = 0, model_n_params = 0;
  int n_threads = 0;
  int64_t n_batch = 0;
  BenchTest test;
  std::vector<double> samples_ts;  // tokens per second of each repetition
  std::vector<double> samples_roofline_ts;  // with a probe: each repetition's roofline
  double avg_ts = 0, stddev_ts = 0;
  // Roofline: the best this machine could do for this test.
  double roofline_ts = 0, roofline_fraction = 0;
  std::string roofline_basis;  // e.g. "read bandwidth 58.3 GB/s / 0.63 GB per token"
  int64_t weight_bytes_per_token = 0;
  double flops_per_token = 0;
  std::string kernel_isa;
  std::string backend = "CPU";  // or the Vulkan device ("Vulkan 0: NVIDIA H200")
  std::string kv_type;
  std::string kv_bytes;  // KvLayout::describe_bytes()
  int64_t kv_bytes_per_token = 0;
  // Set when the test ran faster than its roofline (a fraction above 1.0): the limits it was held to look
  // stale, and how to measure them again.
  std::string warning;
};

// Runs one test `repetitions` times after one warm-up run, against `limits`;
// with a probe, against the limit measured just before each repetition
// instead (the fraction is then the median of the repetitions' fractions).
BenchResult run_bench(LoadedModel& engine, const std::string& model_path, const BenchTest& test, int repetitions,
                      const MeasuredLimits& limits, LimitProbe* probe = nullptr);

}  // namespace kestrel

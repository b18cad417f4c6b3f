#pragma once
// Measured limits of this machine: read bandwidth and peak arithmetic
// throughput per kernel family. The rooflines in `kestrel bench` divide by
// these. Measured once and cached per machine (see limits_cache_path()).
#include <memory>
#include <optional>
#include <string>

#include "core/huge_page_buffer.h"

namespace kestrel {

class ThreadPool;

struct MeasuredLimits {
  int threads = 0;
  double read_bandwidth_gbs = 0;  // GB/s (1e9 bytes), all threads, median of runs
  double f32_fma_gflops = 0;      // GFLOP/s, all threads
  double int8_dot_gops = 0;       // GOP/s (multiply + add = 2 ops), all threads
  double bf16_dot_gflops = 0;     // 0 when the CPU has no bf16 dot instruction
  // The tile unit's (tdpbssd, tdpbf16ps): 0 where AMX is absent or not usable.
  double amx_int8_gops = 0, amx_bf16_gflops = 0;
  std::string f32_isa, int8_isa, bf16_isa;  // instructions the peaks were measured with
  std::string cpu;
  std::string measured_at;  // ISO 8601, UTC
};

MeasuredLimits measure_limits(int n_threads);
class LimitProbe;
MeasuredLimits measure_limits(LimitProbe& probe);

// Probes each limit on demand, as often as asked: `kestrel bench --measure`
// interleaves probes with its repetitions because on a shared machine the
// limits drift by tens of percent within minutes. Each call returns the
// median of `runs` runs; 0 when the CPU has no such instruction.
class LimitProbe {
 public:
  explicit LimitProbe(int n_threads);
  ~LimitProbe();
  int threads() const;
  double read_bandwidth_gbs(int runs = 3);  // the first call allocates and touches 2 GiB
  double f32_fma_gflops(int runs = 3);
  double int8_dot_gops(int runs = 3);
  double bf16_dot_gflops(int runs = 3);
  double amx_int8_gops(int runs = 3);
  double amx_bf16_gflops(int runs = 3);

 private:
  std::unique_ptr<ThreadPool> pool_;
  HugePageBuffer buffer_;
};
std::string limits_cache_path();  // $KESTREL_CACHE_DIR or ~/.cache/kestrel, one file per CPU, thread count and
                                  // ISA level (a level KESTREL_ISA lowers keeps its own: its peaks differ)
// limits_cache_path()/<prefix>-<CPU brand as a file name><suffix>: one file per kind of machine.
std::string per_machine_cache_file(const std::string& prefix, const std::string& suffix);
std::optional<MeasuredLimits> load_cached_limits(int n_threads);
void store_limits(const MeasuredLimits& limits);
// The cached figures for this thread count, measuring (and caching) them if absent.
MeasuredLimits cached_or_measured_limits(int n_threads);

std::string limits_to_json(const MeasuredLimits& l);

}  // namespace kestrel

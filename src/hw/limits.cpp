#include "hw/limits.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/median.h"
#include "core/thread_pool.h"
#include "hw/cpu_features.h"
#include "hw/peak_kernels.h"

namespace kestrel {
namespace {

using Clock = std::chrono::steady_clock;

// Runs `kernel(iterations)` on every thread at once, `runs` times; returns
// the median ops per second.
double parallel_peak(ThreadPool& pool, int runs, double ops_per_iteration, const std::function<void(int64_t)>& kernel) {
  const int64_t iterations = 20'000'000;
  std::vector<double> rates;
  for (int r = 0; r < runs; r++) {
    const auto t0 = Clock::now();
    pool.run([&](int, int) { kernel(iterations); });
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    rates.push_back(ops_per_iteration * static_cast<double>(iterations) * pool.size() / s);
  }
  return median(rates);
}

std::string now_utc() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// One file per thread count, and per level where KESTREL_ISA lowers it (the peaks are the level's).
std::string cache_file(int n_threads) {
  const IsaLevel isa = selected_isa();
  const std::string level = isa == best_isa() ? "" : std::string("-") + isa_name(isa);
  return per_machine_cache_file("limits", "-t" + std::to_string(n_threads) + level + ".json");
}

}  // namespace

// 2 GiB: far beyond any real cache (VMs may report a huge L3). In huge pages,
// as the repacked weights are: the probe gets the best the memory can give.
constexpr size_t kProbeBytes = size_t{2} << 30;

LimitProbe::LimitProbe(int n_threads) : pool_(std::make_unique<ThreadPool>(n_threads)) {}
LimitProbe::~LimitProbe() = default;

int LimitProbe::threads() const { return pool_->size(); }

// The read stream's sum: AVX2 where the build has it and the CPU runs it
// (a plain loop may not saturate memory), else four scalar accumulators.
static float read_sum(const float* p, int64_t n) {
#ifdef KESTREL_HAVE_AVX2_KERNELS
  static const bool avx2 = cpu_features().avx2;
  if (avx2) return peak::sum_floats(p, n);
#endif
  float a[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int k = 0; k < 4; k++) a[k] += p[i + k];
  for (; i < n; i++) a[0] += p[i];
  return a[0] + a[1] + a[2] + a[3];
}

double LimitProbe::read_bandwidth_gbs(int runs) {
  const int64_t n = static_cast<int64_t>(kProbeBytes / sizeof(float));
  if (buffer_.size() == 0) {
    buffer_ = HugePageBuffer(kProbeBytes, "the bandwidth probe");
    float* f = static_cast<float*>(buffer_.data());
    // Touched by the threads that read it, so pages are resident (and local).
    pool_->run([&](int ti, int nt) { std::fill(f + n * ti / nt, f + n * (ti + 1) / nt, 1.0f); });
  }
  const float* buf = static_cast<const float*>(buffer_.data());
  std::vector<double> rates;
  std::vector<float> partial(static_cast<size_t>(pool_->size()));
  volatile float sink = 0;
  for (int r = 0; r < runs; r++) {
    const auto t0 = Clock::now();
    pool_->run([&](int ti, int nt) {
      const int64_t begin = n * ti / nt, end = n * (ti + 1) / nt;
      partial[ti] = read_sum(buf + begin, end - begin);
    });
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    for (float p : partial) sink = sink + p;
    rates.push_back(static_cast<double>(n) * sizeof(float) / s / 1e9);
  }
  return median(rates);
}

double LimitProbe::f32_fma_gflops(int runs) {
#ifdef KESTREL_HAVE_AVX2_KERNELS
  const auto& f = cpu_features();
  volatile float sink = 0;
  const IsaLevel isa = selected_isa();
  if (f.avx512f && isa >= IsaLevel::Avx512) return parallel_peak(*pool_, runs, peak::kF32FmaOpsAvx512, [&](int64_t it) { sink = peak::f32_fma_avx512(it); }) / 1e9;
  if (f.avx2 && f.fma && isa >= IsaLevel::Avx2) return parallel_peak(*pool_, runs, peak::kF32FmaOpsAvx2, [&](int64_t it) { sink = peak::f32_fma_avx2(it); }) / 1e9;
#endif
  (void)runs;
  return 0;
}

double LimitProbe::int8_dot_gops(int runs) {
#ifdef KESTREL_HAVE_AVX2_KERNELS
  const auto& f = cpu_features();
  volatile int32_t sink = 0;
  const IsaLevel isa = selected_isa();
  if (f.avx512vnni && f.avx512bw && isa >= IsaLevel::Avx512) return parallel_peak(*pool_, runs, peak::kInt8OpsVnni512, [&](int64_t it) { sink = peak::int8_dot_vnni512(it); }) / 1e9;
  if (f.avx2 && isa >= IsaLevel::Avx2) return parallel_peak(*pool_, runs, peak::kInt8OpsAvx2, [&](int64_t it) { sink = peak::int8_dot_avx2(it); }) / 1e9;
#endif
  (void)runs;
  return 0;
}

double LimitProbe::bf16_dot_gflops(int runs) {
#ifdef KESTREL_HAVE_AVX2_KERNELS
  volatile float sink = 0;
  if (cpu_features().avx512bf16 && selected_isa() >= IsaLevel::Avx512) return parallel_peak(*pool_, runs, peak::kBf16OpsAvx512, [&](int64_t it) { sink = peak::bf16_dot_avx512(it); }) / 1e9;
#endif
  (void)runs;
  return 0;
}

// The tile peaks: with 1/64 of the iterations (a tile product is 64x a vector dot's work).
double LimitProbe::amx_int8_gops(int runs) {
#ifdef KESTREL_HAVE_AMX_KERNELS
  volatile int32_t sink = 0;
  if (selected_isa() == IsaLevel::Amx)  // the level exists only where the tiles are usable
    return parallel_peak(*pool_, runs, peak::kInt8OpsAmx / 64, [&](int64_t it) { sink = peak::int8_dot_amx(it / 64); }) / 1e9;
#endif
  (void)runs;
  return 0;
}

double LimitProbe::amx_bf16_gflops(int runs) {
#ifdef KESTREL_HAVE_AMX_KERNELS
  volatile float sink = 0;
  if (cpu_features().amx_bf16 && selected_isa() == IsaLevel::Amx)
    return parallel_peak(*pool_, runs, peak::kBf16OpsAmx / 64, [&](int64_t it) { sink = peak::bf16_dot_amx(it / 64); }) / 1e9;
#endif
  (void)runs;
  return 0;
}

MeasuredLimits measure_limits(int n_threads) {
  LimitProbe probe(n_threads);
  return measure_limits(probe);
}

MeasuredLimits measure_limits(LimitProbe& probe) {
  const auto& f = cpu_features();
  MeasuredLimits l;
  l.threads = probe.threads();
  l.cpu = f.brand;
  l.measured_at = now_utc();
  l.read_bandwidth_gbs = probe.read_bandwidth_gbs(5);
  l.f32_fma_gflops = probe.f32_fma_gflops();
  l.int8_dot_gops = probe.int8_dot_gops();
  l.bf16_dot_gflops = probe.bf16_dot_gflops();
  l.amx_int8_gops = probe.amx_int8_gops();
  l.amx_bf16_gflops = probe.amx_bf16_gflops();
  const bool avx512 = selected_isa() >= IsaLevel::Avx512;
  if (l.f32_fma_gflops > 0) l.f32_isa = f.avx512f && avx512 ? "avx512 fma" : "avx2 fma";
  if (l.int8_dot_gops > 0)
    l.int8_isa = f.avx512vnni && f.avx512bw && avx512 ? "avx512 vnni (vpdpbusd)" : "avx2 (vpmaddubsw)";
  if (l.bf16_dot_gflops > 0) l.bf16_isa = "avx512 bf16 (vdpbf16ps)";
  return l;
}

std::string limits_cache_path() {
  if (const char* d = std::getenv("KESTREL_CACHE_DIR"); d && *d) return d;
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/kestrel";
  return "/tmp/kestrel-cache";
}

std::string per_machine_cache_file(const std::string& prefix, const std::string& suffix) {
  std::string cpu = cpu_features().brand.empty() ? "unknown-cpu" : cpu_features().brand;
  for (auto& c : cpu)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '-';
  return fmt::format("{}/{}-{}{}", limits_cache_path(), prefix, cpu, suffix);
}

std::string limits_to_json(const MeasuredLimits& l) {
  nlohmann::json j = {{"cpu", l.cpu},
                      {"threads", l.threads},
                      {"read_bandwidth_gbs", l.read_bandwidth_gbs},
                      {"f32_fma_gflops", l.f32_fma_gflops},
                      {"f32_isa", l.f32_isa},
                      {"int8_dot_gops", l.int8_dot_gops},
                      {"int8_isa", l.int8_isa},
                      {"bf16_dot_gflops", l.bf16_dot_gflops},
                      {"bf16_isa", l.bf16_isa},
                      {"amx_int8_gops", l.amx_int8_gops},
                      {"amx_bf16_gflops", l.amx_bf16_gflops},
                      {"measured_at", l.measured_at}};
  return j.dump(2);
}

std::optional<MeasuredLimits> load_cached_limits(int n_threads) {
  std::ifstream in(cache_file(n_threads));
  if (!in) return std::nullopt;
  try {
    const auto j = nlohmann::json::parse(in);
    MeasuredLimits l;
    l.cpu = j.at("cpu");
    l.threads = j.at("threads");
    l.read_bandwidth_gbs = j.at("read_bandwidth_gbs");
    l.f32_fma_gflops = j.at("f32_fma_gflops");
    l.f32_isa = j.at("f32_isa");
    l.int8_dot_gops = j.at("int8_dot_gops");
    l.int8_isa = j.at("int8_isa");
    l.bf16_dot_gflops = j.at("bf16_dot_gflops");
    l.bf16_isa = j.at("bf16_isa");
    l.measured_at = j.at("measured_at");
    // A cache from before the tile peaks: re-measured where the tiles are usable, zero (no tiles) elsewhere.
    if (!j.contains("amx_int8_gops")) {
      if (amx_state().usable) return std::nullopt;
    } else {
      l.amx_int8_gops = j.at("amx_int8_gops");
      l.amx_bf16_gflops = j.at("amx_bf16_gflops");
    }
    return l;
  } catch (const std::exception&) {
    return std::nullopt;  // a damaged cache is re-measured, never trusted
  }
}

void store_limits(const MeasuredLimits& l) {
  std::error_code ec;
  std::filesystem::create_directories(limits_cache_path(), ec);
  std::ofstream out(cache_file(l.threads));
  if (out) out << limits_to_json(l) << "\n";
}

MeasuredLimits cached_or_measured_limits(int n_threads) {
  if (auto l = load_cached_limits(n_threads)) return *l;
  MeasuredLimits l = measure_limits(n_threads);
  store_limits(l);
  return l;
}

}  // namespace kestrel

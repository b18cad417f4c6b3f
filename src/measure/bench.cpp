#include "measure/bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/median.h"
#include "hw/cpu_features.h"
#include "kernels/matmul_kernels.h"
#include "backend/vulkan/vulkan_backend.h"
#include "runtime/generator.h"

namespace kestrel {
namespace {

using Clock = std::chrono::steady_clock;

// Greedy and to the end (EOS ignored): the cheapest pick, whatever the logits.
GenerationParams bench_params(int64_t max_tokens) {
  GenerationParams p;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.sampling.temperature = 0.0f;
  return p;
}

// n token ids that vary so no row is special; any valid id costs the same.
std::vector<int32_t> varied_prompt(const LoadedModel& e, int64_t n) {
  const int64_t n_vocab = e.model->config().n_vocab;
  std::vector<int32_t> prompt(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i++) prompt[i] = static_cast<int32_t>((i * 7919) % n_vocab);
  return prompt;
}

// Both tests run one request through the step executor (runtime/generator.h),
// whose scheduler allocates its cache as it does for `run` and `serve`.
// Tokens per second of the positions computed.
double tokens_per_second(LoadedModel& e, const std::vector<int32_t>& prompt, int64_t n_gen) {
  const auto t0 = Clock::now();
  const GenerationResult r = generate(e, prompt, bench_params(n_gen));
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  // The last token sampled is not run.
  const auto computed = static_cast<int64_t>(prompt.size() + r.tokens.size()) - (r.tokens.empty() ? 0 : 1);
  return static_cast<double>(computed) / seconds;
}

// Prefill: n_prompt tokens in batches of the model's maximum, logits for the last only.
double prefill_ts(LoadedModel& e, int64_t n_prompt) { return tokens_per_second(e, varied_prompt(e, n_prompt), 0); }

// Decode: n_gen single-token steps from an empty context, as llama-bench's tg test; with a depth, after a
// prompt of depth tokens, its prefill not timed (computed once: later runs start from its cached blocks).
double decode_ts(LoadedModel& e, int64_t n_gen, int64_t depth) {
  const int32_t bos = e.tokenizer->vocab().bos >= 0 ? e.tokenizer->vocab().bos : 0;
  if (depth == 0) return tokens_per_second(e, {bos}, n_gen);
  GenerationParams p = bench_params(n_gen + 1);  // n_gen steps after the first sampled token
  p.prefix_cache = true;
  const GenerationResult r = generate(e, varied_prompt(e, depth), p);
  return static_cast<double>(r.tokens.size() - 1) / r.decode_seconds;
}

struct Roofline {
  double ts = 0;
  std::string basis;
};

// Each row against the limit its kernels are bound by: decode against the
// read bandwidth, prefill against the peak of the instruction its kernels
// run (int8 dots for every quantized type but FP8, BF16 dots for BF16 where
// the CPU has them, else f32 FMAs).
// Prefill on the tile unit (AMX) is bound by its int8 peak instead.
enum class Bound { ReadBandwidth, Int8Dot, AmxInt8, Bf16Dot, F32Fma };

Bound bound_of(bool prefill, const ModelCost& cost) {
  if (!prefill) return Bound::ReadBandwidth;
  const GgmlType t = cost.dominant_type;
  const bool float_weights = t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16;
  if (!float_weights && t != GgmlType::KESTREL_FP8_E4M3)
    return packed_tile_gemm() && matmul_kernels().repacks(t) ? Bound::AmxInt8 : Bound::Int8Dot;
  if (const MatmulKernel* k = matmul_kernels().find(t); k && k->prep == ActPrep::Bf16) return Bound::Bf16Dot;
  return Bound::F32Fma;
}

double limit_of(Bound b, const MeasuredLimits& l) {
  switch (b) {
    case Bound::ReadBandwidth: return l.read_bandwidth_gbs;
    case Bound::Int8Dot: return l.int8_dot_gops;
    case Bound::AmxInt8: return l.amx_int8_gops > 0 ? l.amx_int8_gops : l.int8_dot_gops;
    case Bound::Bf16Dot: return l.bf16_dot_gflops > 0 ? l.bf16_dot_gflops : l.f32_fma_gflops;
    case Bound::F32Fma: return l.f32_fma_gflops;
  }
  return 0;
}

double probe_limit(Bound b, LimitProbe& p) {
  switch (b) {
    case Bound::ReadBandwidth: return p.read_bandwidth_gbs();
    case Bound::Int8Dot: return p.int8_dot_gops();
    case Bound::AmxInt8: return p.amx_int8_gops();
    case Bound::Bf16Dot: return p.bf16_dot_gflops();
    case Bound::F32Fma: return p.f32_fma_gflops();
  }
  return 0;
}

// limit: GB/s for the bandwidth, G(FL)OP/s for the peaks; 0 when unknown.
Roofline roofline(Bound b, double limit, const BenchResult& r) {
  if (limit <= 0) return {};
  if (b == Bound::ReadBandwidth)
    return {limit * 1e9 / static_cast<double>(r.weight_bytes_per_token),
            fmt::format("read bandwidth {:.1f} GB/s / {:.3f} GB per token", limit,
                        static_cast<double>(r.weight_bytes_per_token) / 1e9)};
  const char* name = b == Bound::Int8Dot   ? "int8 dot"
                     : b == Bound::AmxInt8 ? "amx int8"
                     : b == Bound::Bf16Dot ? "bf16 dot"
                                           : "f32 FMA";
  return {limit * 1e9 / r.flops_per_token,
          fmt::format("{} peak {:.0f} G/s / {:.2f} GFLOP per token", name, limit, r.flops_per_token / 1e9)};
}

}  // namespace

BenchResult run_bench(LoadedModel& e, const std::string& path, const BenchTest& test, int reps, const MeasuredLimits& lim,
                      LimitProbe* probe) {
  if (reps <= 0) throw Error(fmt::format("repetitions {} must be positive", reps));
  const bool prefill = test.n_prompt > 0;
  const int64_t tokens = prefill ? test.n_prompt : test.n_gen;
  if (tokens <= 0) throw Error("a bench test needs a positive prompt or generation length");
  // Positions cached: the prompt, or the depth and the decoded tokens (the last one sampled is not run).
  const int64_t positions = prefill ? tokens : test.depth + tokens;
  if (positions > e.n_ctx)
    throw Error(fmt::format("{}: {} tokens do not fit the context of {} (raise -c)", test.name, positions, e.n_ctx));

  const ModelConfig& c = e.model->config();
  const ModelCost cost = model_cost(*e.file, c);
  BenchResult r;
  r.model_filename = path;
  r.model_type = cost.describe(c);
  r.model_size = cost.file_bytes;
  r.model_n_params = cost.n_params;
  r.n_threads = e.backend->n_threads();
  r.n_batch = e.model->max_batch_tokens();
  r.test = test;
  r.kernel_isa = isa_name(selected_isa());
  const DeviceCounters* device = device_counters(*e.backend);
  if (device) r.backend = r.kernel_isa = device->device;
  r.weight_bytes_per_token = cost.weight_bytes_per_token;
  r.kv_type = e.kv->layout().type_name();
  r.kv_bytes_per_token = e.kv->layout().bytes_per_token();
  r.kv_bytes = e.kv->layout().describe_bytes();
  // Average context seen by a token of this test (for attention FLOPs).
  r.flops_per_token = cost.flops_per_token(c, test.depth + tokens / 2);
  const Bound bound = bound_of(prefill, cost);

  auto once = [&] { return prefill ? prefill_ts(e, tokens) : decode_ts(e, tokens, test.depth); };
  once();  // warm-up: page in weights, grow scratch buffers
  std::vector<double> fractions, limits;
  for (int i = 0; i < reps; i++) {
    // With a probe, each repetition is held to the limit measured just before it.
    if (probe) limits.push_back(probe_limit(bound, *probe));
    r.samples_ts.push_back(once());
    if (probe) {
      r.samples_roofline_ts.push_back(roofline(bound, limits.back(), r).ts);
      if (r.samples_roofline_ts.back() > 0) fractions.push_back(r.samples_ts.back() / r.samples_roofline_ts.back());
    }
  }
  double sum = 0;
  for (double s : r.samples_ts) sum += s;
  r.avg_ts = sum / reps;
  double var = 0;
  for (double s : r.samples_ts) var += (s - r.avg_ts) * (s - r.avg_ts);
  r.stddev_ts = reps > 1 ? std::sqrt(var / (reps - 1)) : 0.0;

  if (device) {  // the limits above are the CPU's
    r.roofline_basis = "none: a Vulkan device's bandwidth and matrix peak are not measured yet (docs/gpu.md)";
    r.samples_roofline_ts.clear();
    return r;
  }
  const Roofline roof = roofline(bound, probe ? median(limits) : limit_of(bound, lim), r);
  r.roofline_ts = roof.ts;
  r.roofline_basis = roof.basis;
  if (probe && !fractions.empty()) {
    r.roofline_fraction = median(fractions);
    r.roofline_basis += fmt::format(" (median of {} probes, one before each repetition)", limits.size());
  } else if (r.roofline_ts > 0) {
    r.roofline_fraction = r.avg_ts / r.roofline_ts;
  }
  // Faster than the machine's limit: the limit is wrong, not the speed.
  if (r.roofline_fraction > 1.0)
    r.warning = probe ? fmt::format("{} ran at {:.0f}% of its roofline: the limits probed before the repetitions look "
                                    "low (the machine was busy while probing); run it again on a quiet machine",
                                    test.name, 100 * r.roofline_fraction)
                      : fmt::format("{} ran at {:.0f}% of its roofline: the cached limits (measured {}) look stale, "
                                    "probably measured while the machine was busy; measure them again with "
                                    "`kestrel hw --measure` (or bench with --measure)",
                                    test.name, 100 * r.roofline_fraction, lim.measured_at);
  return r;
}

}  // namespace kestrel

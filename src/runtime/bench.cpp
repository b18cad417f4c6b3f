#include "runtime/bench.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "hw/cpu_features.h"
#include "kernels/gemm_bf16.h"

namespace kestrel {
namespace {

using Clock = std::chrono::steady_clock;

// Prefill: n_prompt tokens in batches of the model's maximum, logits for the last only.
double time_prefill(Engine& e, int64_t n_prompt) {
  const int64_t n_vocab = e.model->config().n_vocab;
  std::vector<float> logits(static_cast<size_t>(n_vocab));
  e.kv->remove(0);
  Batch b;
  const auto t0 = Clock::now();
  for (int64_t start = 0; start < n_prompt; start += e.model->max_batch_tokens()) {
    const int64_t end = std::min(n_prompt, start + e.model->max_batch_tokens());
    b.clear();
    // Token ids vary so no row is special; any valid id costs the same.
    for (int64_t i = start; i < end; i++) b.add(static_cast<int32_t>((i * 7919) % n_vocab), static_cast<int32_t>(i), 0, i == n_prompt - 1);
    e.model->forward(b, *e.kv, logits.data());
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Decode: n_gen single-token steps from an empty context, as llama-bench's tg test.
double time_decode(Engine& e, int64_t n_gen) {
  const int64_t n_vocab = e.model->config().n_vocab;
  std::vector<float> logits(static_cast<size_t>(n_vocab));
  e.kv->remove(0);
  Batch b;
  int32_t tok = e.tokenizer->vocab().bos >= 0 ? e.tokenizer->vocab().bos : 0;
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < n_gen; i++) {
    b.clear();
    b.add(tok, static_cast<int32_t>(i), 0, true);
    e.model->forward(b, *e.kv, logits.data());
    tok = static_cast<int32_t>((tok + 1 + i) % n_vocab);
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

BenchResult run_bench(Engine& e, const std::string& path, const BenchTest& test, int reps, const MeasuredLimits& lim) {
  if (reps <= 0) throw Error(fmt::format("repetitions {} must be positive", reps));
  const bool prefill = test.n_prompt > 0;
  const int64_t tokens = prefill ? test.n_prompt : test.n_gen;
  if (tokens <= 0) throw Error("a bench test needs a positive prompt or generation length");
  if (tokens > e.n_ctx) throw Error(fmt::format("{}: {} tokens do not fit the context of {} (raise -c)", test.name, tokens, e.n_ctx));

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
  r.weight_bytes_per_token = cost.weight_bytes_per_token;
  // Average context seen by a token of this test (for attention FLOPs).
  r.flops_per_token = cost.flops_per_token(c, tokens / 2);

  auto once = [&] { return prefill ? time_prefill(e, tokens) : time_decode(e, tokens); };
  once();  // warm-up: page in weights, grow scratch buffers
  for (int i = 0; i < reps; i++) r.samples_ts.push_back(static_cast<double>(tokens) / once());
  double sum = 0;
  for (double s : r.samples_ts) sum += s;
  r.avg_ts = sum / reps;
  double var = 0;
  for (double s : r.samples_ts) var += (s - r.avg_ts) * (s - r.avg_ts);
  r.stddev_ts = reps > 1 ? std::sqrt(var / (reps - 1)) : 0.0;

  if (prefill) {
    // Each row against the peak of the instruction its kernels run: int8
    // dots for Q8_0/Q4_0, BF16 dots for BF16 where the CPU has them, else f32 FMAs.
    const bool int8 = cost.dominant_type == GgmlType::Q8_0 || cost.dominant_type == GgmlType::Q4_0;
    const bool bf16 = cost.dominant_type == GgmlType::BF16 && gemm_bf16_available() && lim.bf16_dot_gflops > 0;
    const double peak = (int8 ? lim.int8_dot_gops : bf16 ? lim.bf16_dot_gflops : lim.f32_fma_gflops) * 1e9;
    if (peak > 0) {
      r.roofline_ts = peak / r.flops_per_token;
      r.roofline_basis = fmt::format("{} peak {:.0f} G/s / {:.2f} GFLOP per token",
                                     int8 ? "int8 dot" : bf16 ? "bf16 dot" : "f32 FMA", peak / 1e9,
                                     r.flops_per_token / 1e9);
    }
  } else if (lim.read_bandwidth_gbs > 0) {
    r.roofline_ts = lim.read_bandwidth_gbs * 1e9 / static_cast<double>(cost.weight_bytes_per_token);
    r.roofline_basis = fmt::format("read bandwidth {:.1f} GB/s / {:.3f} GB per token", lim.read_bandwidth_gbs,
                                   static_cast<double>(cost.weight_bytes_per_token) / 1e9);
  }
  if (r.roofline_ts > 0) r.roofline_fraction = r.avg_ts / r.roofline_ts;
  return r;
}

}  // namespace kestrel

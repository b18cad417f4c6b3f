#pragma once
// Perplexity by llama.cpp's method, so figures compare across engines: the
// text is tokenized with BOS and cut into chunks of n_ctx tokens; each chunk
// starts with BOS and runs on its own; only the second half of each chunk is
// scored (every token there has at least n_ctx/2 tokens of context);
// PPL = exp(mean negative log-likelihood), ± its standard error. With a
// saved base (the same text through another model, usually the unquantized
// one), also the KL divergence per token and top-1 agreement, as llama.cpp's
// --kl-divergence reports them. The base file is ours: a header (magic
// "KSTLPB01", n_ctx, n_vocab, chunks, scored rows per chunk), the chunk
// tokens (int32), then each scored row's log-probabilities (float32).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/loaded_model.h"

namespace kestrel {

struct PerplexityResult {
  double ppl = 0, ppl_err = 0;
  int64_t n_tokens = 0, n_chunks = 0, n_scored = 0;
  std::vector<double> running;  // PPL after each chunk
  // Against base log-probabilities (kl_base): KL(base || this) per scored
  // token, how often both put the same token first, and the base's PPL.
  bool has_kl = false;
  double kld_mean = 0, kld_median = 0, kld_p99 = 0, kld_max = 0, top1_agreement = 0, base_ppl = 0;
};

struct PerplexityOptions {
  int64_t n_ctx = 512;
  int64_t max_chunks = 0;     // 0: all
  std::string save_logprobs;  // write every scored row's log-probabilities here (a base for kl_base)
  std::string kl_base;        // compare with the log-probabilities saved from another model (same text and n_ctx)
};

// Throws Error when the text has fewer than n_ctx tokens, n_ctx exceeds the
// engine's context, or a base file does not match (tokens, vocabulary, chunks).
// progress(chunk index, chunks in all, running PPL) after each chunk.
PerplexityResult perplexity(LoadedModel& engine, const std::string& text, const PerplexityOptions& options,
                            const std::function<void(int64_t, int64_t, double)>& progress = {});
inline PerplexityResult perplexity(LoadedModel& engine, const std::string& text, int64_t n_ctx, int64_t max_chunks = 0) {
  PerplexityOptions o;
  o.n_ctx = n_ctx;
  o.max_chunks = max_chunks;
  return perplexity(engine, text, o);
}

}  // namespace kestrel

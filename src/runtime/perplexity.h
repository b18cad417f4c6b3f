#pragma once
// Perplexity by llama.cpp's method, so figures compare across engines: the
// text is tokenized with BOS and cut into chunks of n_ctx tokens; each chunk
// starts with BOS and runs on its own; only the second half of each chunk is
// scored (every token there has at least n_ctx/2 tokens of context);
// PPL = exp(mean negative log-likelihood), ± its standard error.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/engine.h"

namespace kestrel {

struct PerplexityResult {
  double ppl = 0, ppl_err = 0;
  int64_t n_tokens = 0, n_chunks = 0, n_scored = 0;
  std::vector<double> running;  // PPL after each chunk
};

// Throws Error when the text has fewer than n_ctx tokens or n_ctx exceeds the engine's context.
// max_chunks 0: all. progress(chunk index, running PPL) after each chunk.
PerplexityResult perplexity(Engine& engine, const std::string& text, int64_t n_ctx, int64_t max_chunks = 0,
                            const std::function<void(int64_t, double)>& progress = {});

}  // namespace kestrel

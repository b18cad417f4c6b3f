#include "runtime/perplexity.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace kestrel {

PerplexityResult perplexity(Engine& e, const std::string& text, int64_t n_ctx, int64_t max_chunks,
                            const std::function<void(int64_t, double)>& progress) {
  if (n_ctx < 4) throw Error(fmt::format("perplexity context {} is too small (at least 4)", n_ctx));
  if (n_ctx > e.n_ctx)
    throw Error(fmt::format("perplexity context {} exceeds the engine's context {} (raise -c)", n_ctx, e.n_ctx));
  const Vocab& vocab = e.tokenizer->vocab();
  const std::vector<int32_t> tokens = e.tokenizer->encode(text, true, false);
  PerplexityResult r;
  r.n_tokens = static_cast<int64_t>(tokens.size());
  r.n_chunks = r.n_tokens / n_ctx;
  if (max_chunks > 0) r.n_chunks = std::min(r.n_chunks, max_chunks);
  if (r.n_chunks == 0)
    throw Error(fmt::format("the text has {} tokens, fewer than one chunk of {} (use a longer text or a smaller --ctx)",
                            r.n_tokens, n_ctx));
  const int64_t nv = e.model->config().n_vocab, step = e.model->max_batch_tokens();
  const int64_t first = n_ctx / 2;
  std::vector<float> logits(static_cast<size_t>(n_ctx * nv));
  double nll = 0, nll2 = 0;
  int64_t count = 0;
  Batch b;
  for (int64_t c = 0; c < r.n_chunks; c++) {
    const int32_t* chunk = tokens.data() + c * n_ctx;
    e.kv->remove(0);
    for (int64_t s = 0; s < n_ctx; s += step) {
      b.clear();
      for (int64_t i = s; i < std::min(n_ctx, s + step); i++) {
        // Each chunk starts a document: BOS in place of its first token.
        const int32_t tok = i == 0 && vocab.add_bos && vocab.bos >= 0 ? vocab.bos : chunk[i];
        b.add(tok, static_cast<int32_t>(i), 0, true);
      }
      e.model->forward(b, *e.kv, logits.data() + s * nv);
    }
    for (int64_t j = first; j < n_ctx - 1; j++) {
      const float* row = logits.data() + j * nv;
      const float mx = *std::max_element(row, row + nv);
      double sum = 0;
      for (int64_t v = 0; v < nv; v++) sum += std::exp(static_cast<double>(row[v] - mx));
      const double logprob = static_cast<double>(row[chunk[j + 1]] - mx) - std::log(sum);
      nll -= logprob;
      nll2 += logprob * logprob;
      count++;
    }
    r.running.push_back(std::exp(nll / static_cast<double>(count)));
    if (progress) progress(c, r.running.back());
  }
  r.n_scored = count;
  const double mean = nll / static_cast<double>(count);
  const double var = nll2 / static_cast<double>(count) - mean * mean;
  r.ppl = std::exp(mean);
  r.ppl_err = var > 0 && count > 1 ? r.ppl * std::sqrt(var / static_cast<double>(count - 1)) : 0.0;
  return r;
}

}  // namespace kestrel

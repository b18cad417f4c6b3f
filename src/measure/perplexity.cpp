#include "measure/perplexity.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

#include "core/error.h"
#include "runtime/step_executor.h"

namespace kestrel {

namespace {

// Every position's logits of a chunk, the chunks one after another through
// one step executor (its scheduler allocates each chunk's cache, in batches
// of the model's maximum; nothing is shared between chunks).
class ChunkLogits {
 public:
  explicit ChunkLogits(LoadedModel& e) : exec_(e, config(e)) {}
  void run(const std::vector<int32_t>& prompt, float* logits) {
    auto req = std::make_unique<Request>();
    req->id = ++id_;
    req->params.prompt = prompt;
    req->params.max_tokens = 0;  // the prompt's logits only
    req->params.all_logits = true;
    req->params.prefix_cache = false;
    exec_.add(std::move(req));
    for (bool done = false; !done;) {
      const StepReport step = exec_.step(0);
      if (!step.ran) throw Error("the KV cache cannot hold a chunk (raise -c/--ctx-size)");
      for (const RequestOutput& out : step) {
        std::copy(out.logits.begin(), out.logits.end(), logits);
        logits += out.logits.size();
        done = done || out.finished;
      }
    }
  }

 private:
  static ExecConfig config(const LoadedModel& e) {
    ExecConfig c;
    c.scheduler.max_batch_tokens = c.scheduler.prefill_chunk = e.model->max_batch_tokens();
    c.scheduler.max_batch_size = 1;
    c.all_logits = true;
    return c;
  }

  StepExecutor exec_;
  int64_t id_ = 0;
};

constexpr char kMagic[8] = {'K', 'S', 'T', 'L', 'P', 'B', '0', '1'};

struct BaseHeader {
  char magic[8];
  int64_t n_ctx, n_vocab, n_chunks, rows_per_chunk;
};

}  // namespace

PerplexityResult perplexity(LoadedModel& e, const std::string& text, const PerplexityOptions& o,
                            const std::function<void(int64_t, int64_t, double)>& progress) {
  const int64_t n_ctx = o.n_ctx, max_chunks = o.max_chunks;
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
  const int64_t nv = e.model->config().n_vocab;
  const int64_t first = n_ctx / 2;
  std::vector<float> logits(static_cast<size_t>(n_ctx * nv));
  double nll = 0, nll2 = 0;
  int64_t count = 0;

  const BaseHeader header{{kMagic[0], kMagic[1], kMagic[2], kMagic[3], kMagic[4], kMagic[5], kMagic[6], kMagic[7]},
                          n_ctx,
                          nv,
                          r.n_chunks,
                          n_ctx - 1 - first};
  std::ofstream save;
  std::ifstream base;
  if (!o.save_logprobs.empty()) {
    save.open(o.save_logprobs, std::ios::binary);
    if (!save) throw Error(fmt::format("{}: cannot write the log-probabilities", o.save_logprobs));
    save.write(reinterpret_cast<const char*>(&header), sizeof header);
    save.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(r.n_chunks * n_ctx * 4));
  }
  if (!o.kl_base.empty()) {
    base.open(o.kl_base, std::ios::binary);
    if (!base) throw Error(fmt::format("{}: cannot read the base log-probabilities", o.kl_base));
    BaseHeader h{};
    base.read(reinterpret_cast<char*>(&h), sizeof h);
    if (!base || std::memcmp(h.magic, kMagic, 8) != 0)
      throw Error(fmt::format("{}: not a log-probability file written by perplexity --save-logprobs", o.kl_base));
    if (h.n_ctx != n_ctx || h.n_vocab != nv || h.n_chunks != r.n_chunks)
      throw Error(fmt::format("{}: saved with n_ctx {}, vocabulary {}, {} chunks; this run has {}, {}, {}", o.kl_base,
                              h.n_ctx, h.n_vocab, h.n_chunks, n_ctx, nv, r.n_chunks));
    std::vector<int32_t> base_tokens(static_cast<size_t>(r.n_chunks * n_ctx));
    base.read(reinterpret_cast<char*>(base_tokens.data()), static_cast<std::streamsize>(base_tokens.size() * 4));
    if (!base || !std::equal(base_tokens.begin(), base_tokens.end(), tokens.begin()))
      throw Error(fmt::format("{}: the base was computed on other tokens (another text or tokenizer)", o.kl_base));
  }
  std::vector<float> logprobs(static_cast<size_t>(nv)), base_row(static_cast<size_t>(nv));
  std::vector<double> klds;
  int64_t agree = 0;
  double base_nll = 0;
  ChunkLogits runner(e);
  for (int64_t c = 0; c < r.n_chunks; c++) {
    const int32_t* chunk = tokens.data() + c * n_ctx;
    std::vector<int32_t> prompt(chunk, chunk + n_ctx);
    // Each chunk starts a document: BOS in place of its first token.
    if (vocab.add_bos && vocab.bos >= 0) prompt[0] = vocab.bos;
    runner.run(prompt, logits.data());
    for (int64_t j = first; j < n_ctx - 1; j++) {
      const float* row = logits.data() + j * nv;
      const float mx = *std::max_element(row, row + nv);
      double sum = 0;
      for (int64_t v = 0; v < nv; v++) sum += std::exp(static_cast<double>(row[v] - mx));
      const double log_sum = std::log(sum);
      const double logprob = static_cast<double>(row[chunk[j + 1]] - mx) - log_sum;
      nll -= logprob;
      nll2 += logprob * logprob;
      count++;
      if (!save.is_open() && !base.is_open()) continue;
      for (int64_t v = 0; v < nv; v++) logprobs[v] = static_cast<float>(static_cast<double>(row[v] - mx) - log_sum);
      if (save.is_open())
        save.write(reinterpret_cast<const char*>(logprobs.data()), static_cast<std::streamsize>(nv * 4));
      if (base.is_open()) {
        base.read(reinterpret_cast<char*>(base_row.data()), static_cast<std::streamsize>(nv * 4));
        if (!base) throw Error(fmt::format("{}: ends early", o.kl_base));
        double kl = 0;
        for (int64_t v = 0; v < nv; v++) kl += std::exp(static_cast<double>(base_row[v])) * (base_row[v] - logprobs[v]);
        klds.push_back(std::max(0.0, kl));
        agree += std::max_element(base_row.begin(), base_row.end()) - base_row.begin() ==
                 std::max_element(logprobs.begin(), logprobs.end()) - logprobs.begin();
        base_nll -= base_row[chunk[j + 1]];
      }
    }
    r.running.push_back(std::exp(nll / static_cast<double>(count)));
    if (progress) progress(c, r.n_chunks, r.running.back());
  }
  r.n_scored = count;
  const double mean = nll / static_cast<double>(count);
  const double var = nll2 / static_cast<double>(count) - mean * mean;
  r.ppl = std::exp(mean);
  r.ppl_err = var > 0 && count > 1 ? r.ppl * std::sqrt(var / static_cast<double>(count - 1)) : 0.0;
  if (!klds.empty()) {
    r.has_kl = true;
    double sum = 0;
    for (double k : klds) sum += k;
    r.kld_mean = sum / static_cast<double>(klds.size());
    std::sort(klds.begin(), klds.end());
    auto at = [&](double q) { return klds[static_cast<size_t>(q * static_cast<double>(klds.size() - 1) + 0.5)]; };
    r.kld_median = at(0.5);
    r.kld_p99 = at(0.99);
    r.kld_max = klds.back();
    r.top1_agreement = static_cast<double>(agree) / static_cast<double>(klds.size());
    r.base_ppl = std::exp(base_nll / static_cast<double>(klds.size()));
  }
  if (save.is_open() && !save) throw Error(fmt::format("{}: write failed", o.save_logprobs));
  return r;
}

}  // namespace kestrel

#include "runtime/mtp_proposer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "runtime/batch.h"
#include "runtime/sampler.h"

namespace kestrel {

MtpProposer::MtpProposer(Engine& target, int32_t seq) : e_(target), seq_(seq), dim_(target.model->config().n_embd) {
  const ModelConfig& c = e_.model->config();
  if (e_.model->mtp_layers() == 0)
    throw Error(c.n_mtp == 0
                    ? fmt::format("the model '{}' has no multi-token-prediction layers (no `nextn` blocks): "
                                  "use --spec ngram or --spec draft",
                                  c.name)
                    : std::string("the model's multi-token-prediction block was not loaded (EngineOptions::load_mtp)"));
  logits_.resize(static_cast<size_t>(c.n_vocab));
  state_.resize(static_cast<size_t>(dim_));
}

void MtpProposer::observe(int64_t first_pos, const int32_t* tokens, const float* hidden, int64_t n, bool settled) {
  if (first_pos == 0 || first_pos > have()) {
    // A new sequence, or one that starts after a prefix someone else ran (the
    // server's shared prefix blocks): the MTP rows before first_pos stay as the cache has them.
    caught_ = first_pos;
    pending_.clear();
    tokens_.clear();
  }
  if (first_pos + n <= caught_) return;  // nothing new
  // Rows from first_pos on replace whatever was there: the target re-ran them.
  const int64_t skip = std::max<int64_t>(0, caught_ - first_pos), at = first_pos + skip - caught_;
  pending_.resize(static_cast<size_t>((at + n - skip) * dim_));
  tokens_.resize(static_cast<size_t>(at + n - skip));
  std::memcpy(pending_.data() + at * dim_, hidden + skip * dim_,
              static_cast<size_t>((n - skip) * dim_) * sizeof(float));
  std::copy(tokens + skip, tokens + n, tokens_.begin() + at);
  if (settled && have() - 2 >= caught_) catch_up(have() - 2, [&](int64_t p) { return tokens_[p + 1 - caught_]; });
}

void MtpProposer::catch_up(int64_t last, const std::function<int32_t(int64_t)>& next_token) {
  Model& m = *e_.model;
  const int64_t chunk = m.max_batch_tokens();
  Batch b;
  for (int64_t p0 = caught_; p0 <= last; p0 += chunk) {
    const int64_t p1 = std::min(last + 1, p0 + chunk);
    b.clear();
    for (int64_t p = p0; p < p1; p++) b.add(next_token(p), static_cast<int32_t>(p), seq_, p == last);
    // Sized by use: the server keeps one proposer per request.
    if (hidden_out_.size() < static_cast<size_t>((p1 - p0) * dim_))
      hidden_out_.resize(static_cast<size_t>((p1 - p0) * dim_));
    m.forward_mtp(b, pending_.data() + (p0 - caught_) * dim_, *e_.kv, logits_.data(), hidden_out_.data());
    if (p1 == last + 1)
      std::copy(hidden_out_.begin() + (p1 - 1 - p0) * dim_, hidden_out_.begin() + (p1 - p0) * dim_, state_.begin());
  }
  const int64_t done = last + 1 - caught_;
  pending_.erase(pending_.begin(), pending_.begin() + done * dim_);
  tokens_.erase(tokens_.begin(), tokens_.begin() + done);
  caught_ = last + 1;
}

std::vector<int32_t> MtpProposer::propose(const std::vector<int32_t>& history, int max) {
  const auto len = static_cast<int64_t>(history.size());
  max = static_cast<int>(std::min<int64_t>(max, e_.n_ctx - len));
  // Catch up positions caught_ .. len-2: each needs the target's state there and the token after it.
  const int64_t last = len - 2;
  if (max <= 0 || last < caught_ || last >= have()) return {};
  catch_up(last, [&](int64_t p) { return history[p + 1]; });
  pending_.clear();  // any rows observed past last were the target's runs of drafts: the next step redoes them
  tokens_.clear();
  Model& m = *e_.model;
  Batch b;
  std::vector<int32_t> draft;
  for (int i = 0; i < max; i++) {
    const int32_t t = argmax(logits_.data(), static_cast<int64_t>(logits_.size()));
    draft.push_back(t);
    if (i + 1 == max) break;
    b.clear();
    b.add(t, static_cast<int32_t>(last + 1 + i), seq_, true);
    m.forward_mtp(b, state_.data(), *e_.kv, logits_.data(), hidden_out_.data());
    std::copy(hidden_out_.begin(), hidden_out_.begin() + dim_, state_.begin());
  }
  return draft;
}

}  // namespace kestrel

#include "spec/mtp_proposer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "model/batch.h"
#include "runtime/sampler.h"
#include "model/batch_io.h"

namespace kestrel {
namespace {

// The MTP block over rows whose positions the scheduler allocated already:
// the target's own positions (catching up) and its draft slots (chained drafts).
void forward_mtp_rows(LoadedModel& e, const Batch& b, const float* hidden_in, float* logits, float* hidden_out) {
  thread_local BatchPlacement place(0);
  if (static_cast<int64_t>(place.slots[0].size()) < b.size()) place = BatchPlacement(e.model->max_batch_tokens());
  place_batch(b, *e.kv, e.model->config().n_vocab, place);
  e.model->forward_mtp(b, place, e.kv->store(), hidden_in, logits, hidden_out);
}

}  // namespace

MtpProposer::MtpProposer(LoadedModel& target, int32_t seq) : e_(target), seq_(seq), dim_(target.model->hidden_dim()) {
  const ModelConfig& c = e_.model->config();
  if (e_.model->mtp_layers() == 0)
    throw Error(c.n_mtp == 0
                    ? fmt::format("the model '{}' has no multi-token-prediction layers (no `nextn` blocks; "
                                  "where the block ships in a file of its own, name it: --spec mtp --draft-model "
                                  "mtp-*.gguf): use --spec ngram or --spec draft",
                                  c.name)
                    : std::string("the model's multi-token-prediction block was not loaded (LoadOptions::load_mtp)"));
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
  if (settled) run_settled_rows();
}

void MtpProposer::run_settled_rows() {
  const int64_t last = have() - 2;  // the last row whose next token is known
  if (last < caught_) return;
  // Only their keys and values are wanted: no logits (no head), no output states.
  Model& m = *e_.model;
  const int64_t chunk = m.max_batch_tokens();
  Batch b;
  for (int64_t p0 = caught_; p0 <= last; p0 += chunk) {
    const int64_t p1 = std::min(last + 1, p0 + chunk);
    b.clear();
    for (int64_t p = p0; p < p1; p++) b.add(tokens_[p + 1 - caught_], static_cast<int32_t>(p), seq_, false);
    forward_mtp_rows(e_, b, pending_.data() + (p0 - caught_) * dim_, nullptr, nullptr);
  }
  const int64_t done = last + 1 - caught_;
  pending_.erase(pending_.begin(), pending_.begin() + done * dim_);
  tokens_.erase(tokens_.begin(), tokens_.begin() + done);
  caught_ = last + 1;
}

std::vector<int32_t> MtpProposer::propose(const std::vector<int32_t>& history, int max) {
  return propose(e_, {{this, &history, max}})[0];
}

std::vector<std::vector<int32_t>> MtpProposer::propose(LoadedModel& e, const std::vector<Request>& requests) {
  Model& m = *e.model;
  const int64_t chunk = m.max_batch_tokens(), nv = m.config().n_vocab, dim = m.hidden_dim();
  const size_t nr = requests.size();
  std::vector<std::vector<int32_t>> drafts(nr);
  std::vector<int> want(nr, 0);
  // Rows of the pending forward: inputs, and per logits row its request.
  Batch b;
  std::vector<float> in, out, logits;
  std::vector<size_t> owners;
  auto flush = [&] {
    if (b.size() == 0) return;
    out.resize(static_cast<size_t>(b.size() * dim));
    logits.resize(static_cast<size_t>(b.n_logit_rows() * nv));
    forward_mtp_rows(e, b, in.data(), logits.data(), out.data());
    for (int64_t i = 0, row = 0; i < b.size(); i++) {
      if (!b.want_logits[i]) continue;
      const size_t r = owners[static_cast<size_t>(row)];
      drafts[r].push_back(argmax(logits.data() + row * nv, nv));
      std::copy(out.begin() + i * dim, out.begin() + (i + 1) * dim, requests[r].proposer->state_.begin());
      row++;
    }
    b.clear();
    in.clear();
    owners.clear();
  };
  // Catch up positions caught_ .. len-2 of each: its state there and the
  // token after it; the last row's logits give the first draft.
  for (size_t r = 0; r < nr; r++) {
    MtpProposer& p = *requests[r].proposer;
    const auto& h = *requests[r].history;
    const auto len = static_cast<int64_t>(h.size());
    const int64_t last = len - 2;
    want[r] = static_cast<int>(std::min<int64_t>(requests[r].max, e.n_ctx - len));
    if (want[r] <= 0 || last < p.caught_ || last >= p.have()) {
      want[r] = 0;
      continue;
    }
    for (int64_t pos = p.caught_; pos <= last; pos++) {
      if (b.size() == chunk) flush();
      b.add(h[pos + 1], static_cast<int32_t>(pos), p.seq_, pos == last);
      const float* state = p.pending_.data() + (pos - p.caught_) * dim;
      in.insert(in.end(), state, state + dim);
      if (pos == last) owners.push_back(r);
    }
  }
  flush();  // may throw (a row the scheduler did not allocate): nothing below has changed a proposer yet
  for (size_t r = 0; r < nr; r++) {
    if (want[r] == 0) continue;
    MtpProposer& p = *requests[r].proposer;
    p.caught_ = static_cast<int64_t>(requests[r].history->size()) - 1;
    // Rows observed past the last were the target's runs of drafts: the next step redoes them.
    p.pending_.clear();
    p.tokens_.clear();
  }
  // Then each draft position: a row per request still drafting, chained on the block's own state.
  for (int step = 1;; step++) {
    for (size_t r = 0; r < nr; r++) {
      if (want[r] <= step || static_cast<int>(drafts[r].size()) != step) continue;
      if (b.size() == chunk) flush();
      MtpProposer& p = *requests[r].proposer;
      b.add(drafts[r].back(), static_cast<int32_t>(p.caught_ - 1 + step), p.seq_, true);
      in.insert(in.end(), p.state_.begin(), p.state_.end());
      owners.push_back(r);
    }
    if (b.size() == 0) break;
    flush();
  }
  return drafts;
}

MtpDrafter::MtpDrafter(LoadedModel& target) : e_(target) { MtpProposer probe(target); }  // throws, naming why

MtpProposer& MtpDrafter::of(int32_t seq) {
  auto& p = per_seq_[seq];
  if (!p) p = std::make_unique<MtpProposer>(e_, seq);
  return *p;
}

void MtpDrafter::observe(int32_t seq, int64_t first_pos, const int32_t* tokens, const float* hidden, int64_t n,
                         bool settled) {
  of(seq).observe(first_pos, tokens, hidden, n, settled);
}

std::vector<std::vector<int32_t>> MtpDrafter::propose(const std::vector<DraftRequest>& batch) {
  std::vector<MtpProposer::Request> reqs;
  reqs.reserve(batch.size());
  for (const DraftRequest& r : batch) reqs.push_back({&of(r.seq), r.history, r.max});
  return MtpProposer::propose(e_, reqs);
}

}  // namespace kestrel

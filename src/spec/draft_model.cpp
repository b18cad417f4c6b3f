#include "spec/draft_model.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "model/batch.h"
#include "runtime/sampler.h"
#include "model/batch_io.h"

namespace kestrel {

DraftModelProposer::DraftModelProposer(Engine& draft, int64_t target_n_vocab) : d_(draft) {
  const int64_t nv = d_.model->config().n_vocab;
  if (nv != target_n_vocab)
    throw Error(fmt::format("the draft model's vocabulary has {} tokens, the target's {}: they must share one", nv,
                            target_n_vocab));
  d_.kv->remove(0);
}

std::unique_ptr<DraftModelProposer> DraftModelProposer::load(EngineOptions options, const Engine& target) {
  options.n_ctx = target.n_ctx;
  auto engine = std::make_unique<Engine>(Engine::load(options));
  auto p = std::make_unique<DraftModelProposer>(*engine, target.model->config().n_vocab);
  p->owned_ = std::move(engine);  // the heap object d_ refers to stays where it is
  return p;
}

std::vector<int32_t> DraftModelProposer::propose(const std::vector<int32_t>& history, int max) {
  return propose(std::vector<Request>{{0, &history, max}})[0];
}

void DraftModelProposer::forget(int32_t seq) {
  d_.kv->erase(seq);
  cached_.erase(seq);
}

std::vector<std::vector<int32_t>> DraftModelProposer::propose(const std::vector<Request>& requests) {
  const auto nr = requests.size();
  const int64_t nv = d_.model->config().n_vocab, chunk = d_.model->max_batch_tokens();
  std::vector<std::vector<int32_t>> drafts(nr);
  std::vector<int> want(nr, 0);
  // Catch up: each sequence keeps what its cache shares with its history;
  // at least the last token runs again, for its logits. Rows of all the
  // requests share forwards; a request's last row gives its first draft.
  Batch b;
  std::vector<size_t> owners;  // per logits row of the pending batch: its request
  auto flush = [&] {
    if (b.size() == 0) return;
    // One logits row per request at most (its last row): sized by use, not by the batch.
    if (logits_.size() < owners.size() * static_cast<size_t>(nv)) logits_.resize(owners.size() * static_cast<size_t>(nv));
    allocate_kv(b, *d_.kv);
    d_.model->forward(b, *d_.kv, logits_.data());
    for (size_t row = 0; row < owners.size(); row++)
      drafts[owners[row]].push_back(argmax(logits_.data() + static_cast<int64_t>(row) * nv, nv));
    b.clear();
    owners.clear();
  };
  for (size_t r = 0; r < nr; r++) {
    const auto& h = *requests[r].history;
    const auto len = static_cast<int64_t>(h.size());
    want[r] = static_cast<int>(std::min<int64_t>(requests[r].max, d_.n_ctx - len));
    if (want[r] <= 0 || len == 0) continue;
    auto& cached = cached_[requests[r].seq];
    auto common =
        static_cast<int64_t>(std::mismatch(cached.begin(), cached.end(), h.begin(), h.end()).first - cached.begin());
    common = std::min(common, len - 1);
    // Its own ledger: a full pool is an answer (no draft for this one this time), not an exception.
    BlockCopies copies;
    const bool rolled_back = d_.kv->blocks().truncate(requests[r].seq, common, copies);
    d_.kv->store().copy(copies);
    if (!rolled_back || !d_.kv->blocks().allocate(requests[r].seq, len + want[r] - 1)) {
      want[r] = 0;
      if (!rolled_back) d_.kv->erase(requests[r].seq);  // a shared block it could not copy: start over
      cached.assign(h.begin(), h.begin() + std::min(common, d_.kv->length(requests[r].seq)));
      continue;
    }
    cached.assign(h.begin(), h.end());
    for (int64_t p = common; p < len; p++) {
      if (b.size() == chunk) flush();
      b.add(h[p], static_cast<int32_t>(p), requests[r].seq, p == len - 1);
      if (p == len - 1) owners.push_back(r);
    }
  }
  flush();
  // Greedy steps: one row per request still drafting.
  for (int step = 1;; step++) {
    for (size_t r = 0; r < nr; r++) {
      if (static_cast<int>(drafts[r].size()) != step || want[r] <= step) continue;
      if (b.size() == chunk) flush();
      const auto pos = static_cast<int32_t>(requests[r].history->size()) + step - 1;
      b.add(drafts[r].back(), pos, requests[r].seq, true);
      cached_[requests[r].seq].push_back(drafts[r].back());
      owners.push_back(r);
    }
    if (b.size() == 0) break;
    flush();
  }
  for (size_t r = 0; r < nr; r++)
    if (static_cast<int>(drafts[r].size()) > want[r]) drafts[r].resize(static_cast<size_t>(std::max(want[r], 0)));
  return drafts;
}

}  // namespace kestrel

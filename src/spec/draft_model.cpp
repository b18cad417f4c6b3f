#include "spec/draft_model.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "model/batch.h"
#include "runtime/sampler.h"
#include "model/batch_io.h"
#include "runtime/scheduler.h"

namespace kestrel {

namespace {

SchedulerConfig draft_scheduler(const LoadedModel& d) {
  SchedulerConfig c;
  c.max_batch_tokens = c.prefill_chunk = d.model->max_batch_tokens();
  c.max_batch_size = 1 << 16;  // every sequence drafting at once (the cache holds what it holds)
  return c;
}

}  // namespace

DraftModelProposer::DraftModelProposer(LoadedModel& draft, int64_t target_n_vocab)
    : d_(draft), sched_(draft_scheduler(draft), draft.kv->blocks()), place_(draft.model->max_batch_tokens()) {
  const int64_t nv = d_.model->config().n_vocab;
  if (nv != target_n_vocab)
    throw Error(fmt::format("the draft model's vocabulary has {} tokens, the target's {}: they must share one", nv,
                            target_n_vocab));
  if (d_.kv->layout().n_recurrent > 0)
    throw Error(fmt::format("a draft model with linear-attention layers ({}) cannot roll its recurrent state back to "
                            "what the target accepted yet: draft with a model without them, or with --spec mtp",
                            d_.model->config().arch));
  d_.kv->remove(0);
}

std::unique_ptr<DraftModelProposer> DraftModelProposer::load(LoadOptions options, const LoadedModel& target) {
  options.n_ctx = target.n_ctx;
  auto engine = std::make_unique<LoadedModel>(LoadedModel::load(options));
  auto p = std::make_unique<DraftModelProposer>(*engine, target.model->config().n_vocab);
  p->owned_ = std::move(engine);  // the heap object d_ refers to stays where it is
  return p;
}

std::vector<int32_t> DraftModelProposer::propose(const std::vector<int32_t>& history, int max) {
  return propose(std::vector<DraftRequest>{{0, &history, max}})[0];
}

void DraftModelProposer::forget(int32_t seq) { sched_.remove(seq); }

// Brings a sequence's record to history: what its cache shares with it stays
// (at least the last token runs again, for its logits), the rest is rolled
// back through the scheduler, which frees those positions' blocks.
void DraftModelProposer::sync(int32_t seq, const std::vector<int32_t>& h) {
  Request* rec = sched_.find(seq);
  if (!rec) {
    auto r = std::make_unique<Request>();
    r->id = r->seq = seq;
    r->params.prompt = h;
    r->params.prefix_cache = false;
    sched_.add(std::move(r));
    return;
  }
  const auto len = static_cast<int64_t>(h.size());
  auto common = static_cast<int64_t>(
      std::mismatch(rec->tokens.begin(), rec->tokens.end(), h.begin(), h.end()).first - rec->tokens.begin());
  common = std::min({common, len - 1, rec->num_computed_tokens});
  rec->tokens = h;
  if (common < rec->num_computed_tokens)
    for (const BlockCopies& c : sched_.update({{seq, common}})) d_.kv->store().copy(c);
}

std::vector<std::vector<int32_t>> DraftModelProposer::propose(const std::vector<DraftRequest>& requests) {
  const auto nr = requests.size();
  const int64_t nv = d_.model->config().n_vocab;
  std::vector<std::vector<int32_t>> drafts(nr);
  std::vector<int> want(nr, 0);
  std::unordered_map<int32_t, size_t> of_seq;  // the request drafting each sequence
  for (size_t r = 0; r < nr; r++) {
    const auto& h = *requests[r].history;
    const auto len = static_cast<int64_t>(h.size());
    want[r] = static_cast<int>(std::min<int64_t>(requests[r].max, d_.n_ctx - len));
    if (want[r] <= 0 || len == 0) continue;
    sync(requests[r].seq, h);
    of_seq[requests[r].seq] = r;
  }
  // Steps as the draft's scheduler plans them: the sequences' catch-up rows
  // share forwards, then each greedy step is one forward with a row per
  // sequence still drafting. A sequence the cache has no room for waits
  // (no draft this time) or is preempted (recomputed next time).
  Batch b;
  std::vector<StepOutcome> outcomes;
  for (;;) {
    const StepPlan& plan = sched_.plan(0);
    if (plan.items.empty()) break;
    b.clear();
    for (const auto& item : plan.items) {
      const Request& rec = *sched_.find(item.id);
      const int64_t last = item.first + item.n_tokens - 1;
      for (int64_t i = item.first; i <= last; i++)
        b.add(rec.tokens[i], static_cast<int32_t>(i), item.seq, item.logits && i == last);
    }
    const auto rows = static_cast<size_t>(b.n_logit_rows());
    if (logits_.size() < rows * static_cast<size_t>(nv)) logits_.resize(rows * static_cast<size_t>(nv));
    place_batch(b, *d_.kv, nv, place_);
    d_.model->forward(b, place_, d_.kv->store(), logits_.data());
    outcomes.clear();
    int64_t row = 0;
    for (const auto& item : plan.items) {
      outcomes.push_back({item.id, item.first + item.n_tokens});
      if (!item.logits) continue;
      const size_t r = of_seq.at(item.seq);
      drafts[r].push_back(argmax(logits_.data() + row++ * nv, nv));
      // Fed on the next step while the request wants more.
      if (static_cast<int>(drafts[r].size()) < want[r]) sched_.find(item.id)->tokens.push_back(drafts[r].back());
    }
    for (const BlockCopies& c : sched_.update(outcomes)) d_.kv->store().copy(c);
  }
  // What was not fed (a draft left when the cache ran out) is not the sequence's.
  for (const auto& [seq, r] : of_seq) {
    Request* rec = sched_.find(seq);
    rec->tokens.resize(static_cast<size_t>(rec->num_computed_tokens));
  }
  return drafts;
}

}  // namespace kestrel

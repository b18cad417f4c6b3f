#include "runtime/scheduler.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace kestrel {

int64_t StepPlan::n_tokens() const {
  int64_t n = 0;
  for (const auto& i : items) n += i.n_tokens;
  return n;
}

Scheduler::Scheduler(const SchedulerConfig& c, BlockManager& blocks) : c_(c), blocks_(blocks) {
  if (c.max_batch_tokens <= 0 || c.max_batch_size <= 0 || c.prefill_chunk <= 0)
    throw Error("scheduler: the batch token budget, batch size and prefill chunk must be positive");
  if (c.aging_ms <= 0 || c.max_wait_ms < 0)
    throw Error("scheduler: aging must be positive and the wait window not negative");
}

Request& Scheduler::add(std::unique_ptr<Request> r) {
  if (find(r->id)) throw Error(fmt::format("scheduler: request {} is already queued", r->id));
  if (r->tokens.empty()) {
    r->tokens = std::move(r->params.prompt);
    r->params.prompt.clear();
    r->n_prompt = r->num_tokens();
  }
  if (r->tokens.empty()) throw Error(fmt::format("scheduler: request {} has no tokens", r->id));
  reqs_.push_back(std::move(r));
  return *reqs_.back();
}

Request& Scheduler::add(int64_t id, int32_t seq, std::vector<int32_t> prompt, int priority, double arrival_ms) {
  auto r = std::make_unique<Request>();
  r->id = id;
  r->seq = seq;
  r->arrival_ms = arrival_ms;
  r->params.priority = priority;
  r->params.prompt = std::move(prompt);
  return add(std::move(r));
}

void Scheduler::remove(int64_t id) {
  auto it = std::find_if(reqs_.begin(), reqs_.end(), [&](const auto& r) { return r->id == id; });
  if (it == reqs_.end()) return;
  blocks_.erase((*it)->seq);
  reqs_.erase(it);
}

Request* Scheduler::find(int64_t id) {
  for (auto& r : reqs_)
    if (r->id == id) return r.get();
  return nullptr;
}

int Scheduler::n_running() const {
  return static_cast<int>(std::count_if(reqs_.begin(), reqs_.end(), [](const auto& r) { return r->running; }));
}
int Scheduler::n_waiting() const { return static_cast<int>(reqs_.size()) - n_running(); }
int Scheduler::n_plannable() const {
  return static_cast<int>(std::count_if(reqs_.begin(), reqs_.end(), [](const auto& r) { return !r->in_flight; }));
}

double Scheduler::effective_priority(const Request& r, double now_ms) const {
  if (c_.policy == SchedulingPolicy::Fcfs) return 0.0;
  return r.priority() - std::max(0.0, now_ms - r.arrival_ms) / c_.aging_ms;
}

bool Scheduler::before(const Request& a, const Request& b, double now_ms) const {
  const double pa = effective_priority(a, now_ms), pb = effective_priority(b, now_ms);
  if (pa != pb) return pa < pb;
  if (a.arrival_ms != b.arrival_ms) return a.arrival_ms < b.arrival_ms;
  return a.id < b.id;
}

// The batch window: an idle engine may wait briefly so that requests
// arriving together prefill together.
bool Scheduler::batch_window_open(double now_ms, StepPlan& p) const {
  if (c_.max_wait_ms <= 0 || n_running() > 0) return false;
  double oldest = now_ms;
  int64_t tokens = 0;
  bool urgent = false;
  for (const auto& r : reqs_) {
    oldest = std::min(oldest, r->arrival_ms);
    tokens += r->num_tokens();
    urgent = urgent || r->priority() < 0;
  }
  const double waited = now_ms - oldest;
  if (urgent || waited >= c_.max_wait_ms || tokens >= c_.max_batch_tokens ||
      static_cast<int>(reqs_.size()) >= c_.max_batch_size)
    return false;
  p.wait_ms = c_.max_wait_ms - waited;
  return true;
}

void Scheduler::evict(Request& victim, StepPlan& p) {
  blocks_.erase(victim.seq);
  victim.running = false;
  victim.num_computed_tokens = 0;
  p.preempted.push_back(victim.id);
}

// The last block boundary before a request's last prompt token: the most of its prompt a later prompt can share
// (share_prefix leaves the last token to compute), where a linear-attention model keeps its state's snapshot.
int64_t Scheduler::shareable_prompt(const Request& r) const {
  const int64_t bs = blocks_.block_size();
  return (r.n_prompt - 1) / bs * bs;
}

// A chunk of n tokens from r's computed ones, shortened so that it does not end inside a media span whose rows
// attend to each other both ways (each needs every other's keys in the same step); 0 when such a span begins
// the chunk and does not fit it (StepExecutor::add refuses spans longer than a prefill chunk).
int64_t Scheduler::media_cut(const Request& r, int64_t n) const {
  const int64_t from = r.num_computed_tokens, to = from + n;
  for (const MediaSpan& m : r.params.media) {
    if (!m.both_ways || m.end() <= to || m.start >= to) continue;
    return m.start > from ? m.start - from : 0;  // (a prefix hit may end inside the span: its rest must fit)
  }
  return n;
}

int64_t Scheduler::admit(Request& r, int64_t n_max, double now_ms, StepPlan& p) {
  const bool fresh = !r.running;
  BlockManager::PrefixStats before_lookup = blocks_.prefix_stats();
  if (fresh && r.prefix_cache()) r.num_computed_tokens = blocks_.share_prefix(r.seq, r.tokens.data(), r.num_tokens(), r.lora_key());
  int64_t n = std::min(n_max, r.num_tokens() - r.num_computed_tokens);
  if (blocks_.n_state_slots() > 0 && r.prefix_cache() && n > 1) {
    // Recurrent state is kept for prefixes only where a step ends on a block boundary: a prefill ends once at
    // the last boundary a later prompt could share, then goes on.
    const int64_t boundary = shareable_prompt(r);
    if (r.num_computed_tokens < boundary && r.num_computed_tokens + n > boundary) n = boundary - r.num_computed_tokens;
  }
  n = media_cut(r, n);
  if (n == 0) {  // a media span attended both ways does not fit what is left of the step: it waits
    if (fresh) {
      blocks_.erase(r.seq);
      r.num_computed_tokens = 0;
    }
    return 0;
  }
  const int64_t target = r.num_computed_tokens + n;
  if (blocks_.blocks_for(target) <= blocks_.max_blocks_per_seq()) {
    while (!blocks_.can_allocate(r.seq, target)) {
      // Evict the running request that would run last, if r runs before it.
      Request* victim = nullptr;
      for (auto& q : reqs_)
        if (q->running && !q->in_flight && q.get() != &r &&
            std::find(planned_.begin(), planned_.end(), q->id) == planned_.end() &&
            (!victim || before(*victim, *q, now_ms)))
          victim = q.get();
      if (!victim || !(r.running || before(r, *victim, now_ms))) break;
      evict(*victim, p);
    }
  }
  if (!blocks_.allocate(r.seq, target)) {
    if (fresh) {  // it waits, holding nothing (its prefix stays cached for the next try)
      blocks_.erase(r.seq);
      r.num_computed_tokens = 0;
    }
    return 0;
  }
  if (fresh) {
    if (auto restore = blocks_.take_state_restore(r.seq)) {
      BlockCopies c;
      c.has_state = true;
      c.state = *restore;
      p.state_copies.push_back(c);
    }
    const auto& after = blocks_.prefix_stats();
    p.queried_prefix_blocks += after.queried_blocks - before_lookup.queried_blocks;
    p.hit_prefix_blocks += after.hit_blocks - before_lookup.hit_blocks;
    if (!r.admitted_once) r.num_cached_tokens = r.num_computed_tokens;
    r.admitted_once = true;
  }
  r.running = true;
  return n;
}

const StepPlan& Scheduler::plan(double now_ms, int max_requests) {
  StepPlan& p = plan_;
  p.items.clear();
  p.preempted.clear();
  p.state_copies.clear();
  p.wait_ms = 0;
  p.queried_prefix_blocks = p.hit_prefix_blocks = 0;
  if (reqs_.empty() || batch_window_open(now_ms, p)) return p;

  // Candidates: decodes of running requests (latency first), then running
  // prefills (chunked prompts in progress), then waiting requests; each
  // group in policy order.
  std::vector<Request*>& order = order_;
  order.clear();
  for (auto& r : reqs_)
    if (!r->in_flight) order.push_back(r.get());
  auto group = [](const Request& r) {
    if (!r.running) return 2;
    return r.num_tokens() - r.num_computed_tokens <= 1 ? 0 : 1;
  };
  // A total order (group, policy, arrival, id): std::sort needs no buffer, as stable_sort would.
  std::sort(order.begin(), order.end(), [&](const Request* a, const Request* b) {
    if (group(*a) != group(*b)) return group(*a) < group(*b);
    return before(*a, *b, now_ms);
  });

  planned_.clear();
  int64_t budget = c_.max_batch_tokens;
  int seqs = std::max(0, std::min(c_.max_batch_size, max_requests));
  for (Request* r : order) {
    if (seqs == 0 || budget == 0) break;
    if (r->num_computed_tokens >= r->num_tokens()) continue;  // nothing to feed (cannot happen for live requests)
    if (std::find(p.preempted.begin(), p.preempted.end(), r->id) != p.preempted.end()) continue;  // not back at once
    const int64_t n = admit(*r, std::min(c_.prefill_chunk, budget), now_ms, p);
    if (n == 0) continue;  // waits for blocks; later (smaller) requests may still fit
    budget -= n;
    seqs--;
    planned_.push_back(r->id);
    const bool logits = r->num_computed_tokens + n == r->num_tokens();
    p.items.push_back({r->id, r->seq, r->num_computed_tokens, n, logits, 0});
  }
  plan_drafts(p, budget);
  return p;
}

// Drafted tokens ride after a decode token with what is left of the budget,
// in blocks that are free: a draft never preempts anyone.
void Scheduler::plan_drafts(StepPlan& p, int64_t budget) {
  for (auto& item : p.items) {
    if (budget <= 0) return;
    Request* r = find(item.id);
    if (!item.logits || item.n_tokens != 1 || r->draft_want <= 0) continue;
    int64_t slots = std::min<int64_t>(r->draft_want, budget);
    while (slots > 0 && !blocks_.can_allocate(item.seq, item.first + 1 + slots)) slots--;
    if (slots == 0) continue;
    blocks_.allocate(item.seq, item.first + 1 + slots);
    item.draft_slots = static_cast<int>(slots);
    budget -= slots;
  }
}

const std::vector<BlockCopies>& Scheduler::update(const std::vector<StepOutcome>& outcomes) {
  copies_.clear();
  for (const StepOutcome& o : outcomes) {
    Request* r = find(o.id);
    if (!r) continue;
    r->num_computed_tokens = o.computed;
    BlockCopies copies;
    if (!blocks_.truncate(r->seq, o.computed, copies)) {
      // No block is free for the private copy of a shared block it rolled
      // back into: it recomputes later instead.
      blocks_.erase(r->seq);
      r->running = false;
      r->num_computed_tokens = 0;
      continue;
    }
    if (copies.n > 0) copies_.push_back(copies);
    // Named before the slide below lets the sliding group release them: a block that leaves this sequence's
    // window may still be in the window of a later prompt's first computed token (its prefix ending there).
    if (r->prefix_cache()) blocks_.publish_prefix(r->seq, r->tokens.data(), o.computed, r->lora_key());
    // Its next query starts at `computed` (rollbacks never go below it): the
    // sliding-window group releases the blocks that left that query's window.
    blocks_.slide(r->seq, o.computed);
    if (r->prefix_cache()) {
      // Anthropic's cache_control breakpoints, once their prefix is computed.
      for (auto& pins = r->params.cache_pins; r->cache_pins_done < pins.size(); r->cache_pins_done++) {
        const auto [tokens, seconds] = pins[r->cache_pins_done];
        if (o.computed < std::min(tokens, r->n_prompt)) break;
        blocks_.pin_prefix(r->seq, tokens, PrefixTiers::now_s() + seconds);
      }
      // Recurrent state at a block's end, within the part of the prompt a later prompt could share (decode
      // steps would cycle the few snapshots every block).
      if (auto save = o.computed <= shareable_prompt(*r) ? blocks_.save_snapshot(r->seq, o.computed) : std::nullopt) {
        BlockCopies c;
        c.has_state = true;
        c.state = *save;
        copies_.push_back(c);
      }
    }
  }
  return copies_;
}

}  // namespace kestrel

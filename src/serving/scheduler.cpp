#include "serving/scheduler.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace kestrel {

int64_t StepPlan::n_tokens() const {
  int64_t n = 0;
  for (const auto& i : items) n += i.n_tokens;
  return n;
}

Scheduler::Scheduler(const SchedulerConfig& c) : c_(c) {
  if (c.max_batch_tokens <= 0 || c.max_batch_size <= 0 || c.prefill_chunk <= 0 || c.block_size <= 0)
    throw Error("scheduler: the batch token budget, batch size, prefill chunk and block size must be positive");
  if (c.aging_ms <= 0 || c.max_wait_ms < 0)
    throw Error("scheduler: aging must be positive and the wait window not negative");
}

void Scheduler::add(const SchedRequest& r) {
  if (find(r.id)) throw Error(fmt::format("scheduler: request {} is already queued", r.id));
  SchedRequest q = r;
  q.running = false;
  q.computed = 0;
  q.kv_blocks = 0;
  reqs_.push_back(q);
}

void Scheduler::remove(int64_t id) {
  reqs_.erase(std::remove_if(reqs_.begin(), reqs_.end(), [&](const SchedRequest& r) { return r.id == id; }),
              reqs_.end());
}

SchedRequest* Scheduler::find(int64_t id) {
  for (auto& r : reqs_)
    if (r.id == id) return &r;
  return nullptr;
}

int Scheduler::n_running() const {
  return static_cast<int>(std::count_if(reqs_.begin(), reqs_.end(), [](const SchedRequest& r) { return r.running; }));
}
int Scheduler::n_waiting() const { return static_cast<int>(reqs_.size()) - n_running(); }

double Scheduler::effective_priority(const SchedRequest& r, double now_ms) const {
  if (c_.policy == SchedulingPolicy::Fcfs) return 0.0;
  return r.priority - std::max(0.0, now_ms - r.arrival_ms) / c_.aging_ms;
}

bool Scheduler::before(const SchedRequest& a, const SchedRequest& b, double now_ms) const {
  const double pa = effective_priority(a, now_ms), pb = effective_priority(b, now_ms);
  if (pa != pb) return pa < pb;
  if (a.arrival_ms != b.arrival_ms) return a.arrival_ms < b.arrival_ms;
  return a.id < b.id;
}

StepPlan Scheduler::plan(double now_ms, int64_t free_blocks) {
  StepPlan p;
  if (reqs_.empty()) return p;

  // The batch window: an idle engine may wait briefly so that requests
  // arriving together prefill together.
  if (c_.max_wait_ms > 0 && n_running() == 0) {
    double oldest = now_ms;
    int64_t tokens = 0;
    bool urgent = false;
    for (const auto& r : reqs_) {
      oldest = std::min(oldest, r.arrival_ms);
      tokens += r.prompt_tokens;
      urgent = urgent || r.priority < 0;
    }
    const double waited = now_ms - oldest;
    if (!urgent && waited < c_.max_wait_ms && tokens < c_.max_batch_tokens &&
        static_cast<int>(reqs_.size()) < c_.max_batch_size) {
      p.wait_ms = c_.max_wait_ms - waited;
      return p;
    }
  }

  // Candidates: decodes of running requests (latency first), then running
  // prefills (chunked prompts in progress), then waiting requests; each
  // group in policy order.
  std::vector<SchedRequest*> order;
  for (auto& r : reqs_) order.push_back(&r);
  auto group = [](const SchedRequest& r) {
    if (!r.running) return 2;
    return r.prompt_tokens - r.computed <= 1 ? 0 : 1;
  };
  std::stable_sort(order.begin(), order.end(), [&](const SchedRequest* a, const SchedRequest* b) {
    if (group(*a) != group(*b)) return group(*a) < group(*b);
    return before(*a, *b, now_ms);
  });

  std::vector<int64_t> planned;
  auto is_planned = [&](const SchedRequest* r) {
    return std::find(planned.begin(), planned.end(), r->id) != planned.end();
  };
  int64_t budget = c_.max_batch_tokens;
  int seqs = c_.max_batch_size;
  for (SchedRequest* r : order) {
    if (seqs == 0 || budget == 0) break;
    if (r->prefill_done()) continue;  // nothing to feed (cannot happen for live requests)
    const int64_t remaining = r->prompt_tokens - r->computed;
    const int64_t n = std::min({remaining, c_.prefill_chunk, budget});
    int64_t need = blocks_for(r->computed + n) - r->kv_blocks;
    while (need > free_blocks) {
      // Evict the running request that would run last, if r runs before it.
      SchedRequest* victim = nullptr;
      for (auto& q : reqs_)
        if (q.running && &q != r && !is_planned(&q) && (!victim || before(*victim, q, now_ms))) victim = &q;
      if (!victim || !(r->running || before(*r, *victim, now_ms))) break;
      free_blocks += victim->kv_blocks;
      victim->running = false;
      victim->computed = 0;
      victim->kv_blocks = 0;
      p.preempted.push_back(victim->id);
    }
    if (need > free_blocks) continue;  // waits for blocks; later (smaller) requests may still fit
    free_blocks -= need;
    budget -= n;
    seqs--;
    r->running = true;
    planned.push_back(r->id);
    p.items.push_back({r->id, n, remaining > 1 || r->computed == 0});
  }
  return p;
}

void Scheduler::advance(int64_t id, int64_t computed, int64_t kv_blocks) {
  SchedRequest* r = find(id);
  if (!r) return;
  r->computed = computed;
  r->kv_blocks = kv_blocks;
}

void Scheduler::add_generated(int64_t id) {
  if (SchedRequest* r = find(id)) r->prompt_tokens++;
}

}  // namespace kestrel

// The serving scheduler without a model: token budget, sequence cap,
// chunked prefill next to running decodes, FCFS and priority order, aging,
// preemption when KV blocks run out, and the batching window.
#include <gtest/gtest.h>

#include "serving/scheduler.h"

namespace kestrel {
namespace {

SchedRequest req(int64_t id, int64_t prompt, double arrival = 0, int priority = 0) {
  SchedRequest r;
  r.id = id;
  r.prompt_tokens = prompt;
  r.arrival_ms = arrival;
  r.priority = priority;
  return r;
}

// Applies a plan as the executor would: every item's tokens computed, blocks grown to fit.
void run(Scheduler& s, const StepPlan& p) {
  for (const auto& it : p.items) {
    SchedRequest* r = s.find(it.id);
    ASSERT_NE(r, nullptr);
    const int64_t computed = r->computed + it.n_tokens;
    s.advance(it.id, computed, s.blocks_for(computed));
    if (computed == r->prompt_tokens) s.add_generated(it.id);  // sampled a token: one more to feed
  }
}

int64_t tokens_of(const StepPlan& p, int64_t id) {
  for (const auto& it : p.items)
    if (it.id == id) return it.n_tokens;
  return 0;
}

TEST(Scheduler, TokenBudgetSequenceCapAndChunkedPrefill) {
  SchedulerConfig c;
  c.max_batch_tokens = 512;
  c.prefill_chunk = 256;
  c.max_batch_size = 8;
  Scheduler s(c);
  s.add(req(1, 300, 0));
  s.add(req(2, 300, 1));
  s.add(req(3, 10, 2));
  StepPlan p = s.plan(10, 1000);
  EXPECT_EQ(tokens_of(p, 1), 256);  // chunked
  EXPECT_EQ(tokens_of(p, 2), 256);
  EXPECT_EQ(tokens_of(p, 3), 0);  // budget used up
  EXPECT_EQ(p.n_tokens(), 512);
  run(s, p);
  p = s.plan(20, 1000);
  EXPECT_EQ(tokens_of(p, 1), 44);  // the rest of each prompt, and the third starts
  EXPECT_EQ(tokens_of(p, 2), 44);
  EXPECT_EQ(tokens_of(p, 3), 10);
  run(s, p);
  p = s.plan(30, 1000);  // all three decode now: one token each
  EXPECT_EQ(p.items.size(), 3u);
  EXPECT_EQ(p.n_tokens(), 3);

  c.max_batch_size = 2;  // the sequence cap
  Scheduler capped(c);
  for (int i = 0; i < 5; i++) capped.add(req(i, 4, i));
  EXPECT_EQ(capped.plan(10, 1000).items.size(), 2u);
}

TEST(Scheduler, RunningDecodesAreNeverStalledByALongPrompt) {
  SchedulerConfig c;
  c.max_batch_tokens = 64;
  c.prefill_chunk = 64;
  Scheduler s(c);
  s.add(req(1, 8, 0));
  run(s, s.plan(1, 1000));  // request 1 prefilled, now decoding
  s.add(req(2, 1000, 2));   // a long prompt arrives
  for (int step = 0; step < 5; step++) {
    const StepPlan p = s.plan(3 + step, 1000);
    EXPECT_EQ(tokens_of(p, 1), 1) << "step " << step;   // the decode runs every step
    EXPECT_EQ(tokens_of(p, 2), 63) << "step " << step;  // the prompt takes what is left
    run(s, p);
  }
}

TEST(Scheduler, FcfsIgnoresPriorityAndPriorityPolicyHonoursIt) {
  SchedulerConfig c;
  c.max_batch_size = 1;
  Scheduler fcfs(c);
  fcfs.add(req(1, 4, 0, 5));
  fcfs.add(req(2, 4, 1, -5));
  EXPECT_EQ(fcfs.plan(2, 100).items.at(0).id, 1);

  c.policy = SchedulingPolicy::Priority;
  Scheduler prio(c);
  prio.add(req(1, 4, 0, 5));
  prio.add(req(2, 4, 1, 0));
  prio.add(req(3, 4, 2, 0));
  EXPECT_EQ(prio.plan(3, 100).items.at(0).id, 2);  // lower value first; ties by arrival
}

TEST(Scheduler, AgingBoundsStarvation) {
  SchedulerConfig c;
  c.max_batch_size = 1;
  c.policy = SchedulingPolicy::Priority;
  c.aging_ms = 1000;
  Scheduler s(c);
  s.add(req(1, 4, 0, 3));  // low priority, waiting since t=0
  // A stream of priority-0 requests keeps arriving; each is fresh.
  int64_t next = 100;
  int64_t first_run_of_1 = -1;
  for (double now = 10; now < 10000 && first_run_of_1 < 0; now += 100) {
    s.add(req(next++, 4, now, 0));
    const StepPlan p = s.plan(now, 100);
    ASSERT_EQ(p.items.size(), 1u);
    if (p.items[0].id == 1) first_run_of_1 = static_cast<int64_t>(now);
    s.remove(p.items[0].id);  // it finishes at once
  }
  // Priority 3 has aged to below a fresh 0 once it has waited ~3 s.
  EXPECT_GE(first_run_of_1, 3000);
  EXPECT_LE(first_run_of_1, 3200);
}

TEST(Scheduler, PreemptsTheRequestThatWouldRunLastWhenBlocksRunOut) {
  SchedulerConfig c;
  c.block_size = 4;
  Scheduler s(c);
  s.add(req(1, 4, 0));
  s.add(req(2, 4, 1));
  StepPlan p = s.plan(2, 2);  // exactly one block each
  ASSERT_EQ(p.items.size(), 2u);
  run(s, p);
  // Each now needs a fifth token: a new block, and none is free. The newer
  // request is preempted (its block freed, requeued to recompute); the older continues.
  p = s.plan(3, 0);
  ASSERT_EQ(p.preempted.size(), 1u);
  EXPECT_EQ(p.preempted[0], 2);
  EXPECT_EQ(tokens_of(p, 1), 1);
  const SchedRequest* r2 = s.find(2);
  EXPECT_FALSE(r2->running);
  EXPECT_EQ(r2->computed, 0);
  EXPECT_EQ(r2->prompt_tokens, 5);  // prompt + the token it generated: recomputed later
}

TEST(Scheduler, AHigherPriorityArrivalPreemptsUnderThePriorityPolicyOnly) {
  for (auto policy : {SchedulingPolicy::Fcfs, SchedulingPolicy::Priority}) {
    SchedulerConfig c;
    c.block_size = 4;
    c.policy = policy;
    Scheduler s(c);
    s.add(req(1, 8, 0, 0));
    run(s, s.plan(1, 2));      // request 1 holds both blocks
    s.add(req(2, 4, 2, -10));  // urgent
    const StepPlan p = s.plan(3, 0);
    if (policy == SchedulingPolicy::Priority) {
      EXPECT_EQ(p.preempted, std::vector<int64_t>{1});
      EXPECT_EQ(tokens_of(p, 2), 4);
    } else {
      EXPECT_TRUE(p.preempted.empty());
      EXPECT_EQ(tokens_of(p, 2), 0);  // waits for blocks
    }
  }
}

TEST(Scheduler, BatchWindowWaitsForMoreRequestsUnlessUrgent) {
  SchedulerConfig c;
  c.max_wait_ms = 50;
  Scheduler s(c);
  s.add(req(1, 4, 0));
  StepPlan p = s.plan(10, 100);
  EXPECT_TRUE(p.items.empty());
  EXPECT_DOUBLE_EQ(p.wait_ms, 40);
  s.add(req(2, 4, 12, -1));  // high priority: no waiting
  p = s.plan(12, 100);
  EXPECT_EQ(p.items.size(), 2u);

  Scheduler t(c);
  t.add(req(1, 4, 0));
  EXPECT_EQ(t.plan(60, 100).items.size(), 1u);  // the window has passed
}

TEST(Scheduler, EveryRunningRequestDecodesEachStep) {
  SchedulerConfig c;
  c.max_batch_size = 8;
  Scheduler s(c);
  for (int i = 0; i < 8; i++) s.add(req(i, 3, i));
  run(s, s.plan(10, 100));
  for (int step = 0; step < 10; step++) {
    const StepPlan p = s.plan(11 + step, 100);
    ASSERT_EQ(p.items.size(), 8u);  // fair: nobody skips a step
    run(s, p);
  }
}

}  // namespace
}  // namespace kestrel

// The serving scheduler without a model, driving a real KV ledger
// (BlockManager) with fake steps: token budget, sequence cap, chunked
// prefill next to running decodes, FCFS and priority order, aging,
// preemption when blocks run out, prefix sharing, draft slots, and the
// batching window.
#include <gtest/gtest.h>

#include <vector>

#include "kv/block_manager.h"
#include "runtime/scheduler.h"

namespace kestrel {
namespace {

// A prompt of n tokens nobody else has (unless `same` names a shared text).
std::vector<int32_t> prompt(int64_t id, int64_t n, int same = -1) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i++) t[static_cast<size_t>(i)] = static_cast<int32_t>((same >= 0 ? same : id) * 10000 + i);
  return t;
}

void add(Scheduler& s, int64_t id, int64_t n, double arrival = 0, int priority = 0, int same = -1) {
  s.add(id, static_cast<int32_t>(id), prompt(id, n, same), priority, arrival);
}

// Runs a plan as the executor would: every item's tokens computed, a token
// sampled after each that asked for logits, drafts all rejected.
void run(Scheduler& s, const StepPlan& p) {
  std::vector<StepOutcome> out;
  for (const auto& it : p.items) {
    Request* r = s.find(it.id);
    ASSERT_NE(r, nullptr);
    if (it.logits) r->tokens.push_back(7);
    out.push_back({it.id, it.first + it.n_tokens});
  }
  EXPECT_TRUE(s.update(out).empty());  // no shared block was rolled back into
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
  BlockManager blocks(1000, 16);
  Scheduler s(c, blocks);
  add(s, 1, 300, 0);
  add(s, 2, 300, 1);
  add(s, 3, 10, 2);
  StepPlan p = s.plan(10);
  EXPECT_EQ(tokens_of(p, 1), 256);  // chunked
  EXPECT_EQ(tokens_of(p, 2), 256);
  EXPECT_EQ(tokens_of(p, 3), 0);  // budget used up
  EXPECT_EQ(p.n_tokens(), 512);
  EXPECT_FALSE(p.items[0].logits);  // a chunk short of the prompt's end
  EXPECT_EQ(blocks.length(1), 256);  // the plan allocated what the step writes
  run(s, p);
  p = s.plan(20);
  EXPECT_EQ(tokens_of(p, 1), 44);  // the rest of each prompt, and the third starts
  EXPECT_EQ(tokens_of(p, 2), 44);
  EXPECT_EQ(tokens_of(p, 3), 10);
  EXPECT_TRUE(p.items[0].logits);
  run(s, p);
  p = s.plan(30);  // all three decode now: one token each
  EXPECT_EQ(p.items.size(), 3u);
  EXPECT_EQ(p.n_tokens(), 3);
  EXPECT_EQ(p.items[0].first, 300);

  c.max_batch_size = 2;  // the sequence cap
  BlockManager more(1000, 16);
  Scheduler capped(c, more);
  for (int i = 0; i < 5; i++) add(capped, i, 4, i);
  EXPECT_EQ(capped.plan(10).items.size(), 2u);
}

TEST(Scheduler, RunningDecodesAreNeverStalledByALongPrompt) {
  SchedulerConfig c;
  c.max_batch_tokens = 64;
  c.prefill_chunk = 64;
  BlockManager blocks(1000, 16);
  Scheduler s(c, blocks);
  add(s, 1, 8, 0);
  run(s, s.plan(1));  // request 1 prefilled, now decoding
  add(s, 2, 1000, 2);  // a long prompt arrives
  for (int step = 0; step < 5; step++) {
    const StepPlan p = s.plan(3 + step);
    EXPECT_EQ(tokens_of(p, 1), 1) << "step " << step;   // the decode runs every step
    EXPECT_EQ(tokens_of(p, 2), 63) << "step " << step;  // the prompt takes what is left
    run(s, p);
  }
}

TEST(Scheduler, FcfsIgnoresPriorityAndPriorityPolicyHonoursIt) {
  SchedulerConfig c;
  c.max_batch_size = 1;
  BlockManager b1(100, 16);
  Scheduler fcfs(c, b1);
  add(fcfs, 1, 4, 0, 5);
  add(fcfs, 2, 4, 1, -5);
  EXPECT_EQ(fcfs.plan(2).items.at(0).id, 1);

  c.policy = SchedulingPolicy::Priority;
  BlockManager b2(100, 16);
  Scheduler prio(c, b2);
  add(prio, 1, 4, 0, 5);
  add(prio, 2, 4, 1, 0);
  add(prio, 3, 4, 2, 0);
  EXPECT_EQ(prio.plan(3).items.at(0).id, 2);  // lower value first; ties by arrival
}

TEST(Scheduler, AgingBoundsStarvation) {
  SchedulerConfig c;
  c.max_batch_size = 1;
  c.policy = SchedulingPolicy::Priority;
  c.aging_ms = 1000;
  BlockManager blocks(100, 16);
  Scheduler s(c, blocks);
  add(s, 1, 4, 0, 3);  // low priority, waiting since t=0
  // A stream of priority-0 requests keeps arriving; each is fresh.
  int64_t next = 100;
  int64_t first_run_of_1 = -1;
  for (double now = 10; now < 10000 && first_run_of_1 < 0; now += 100) {
    add(s, next++, 4, now, 0);
    const StepPlan p = s.plan(now);
    ASSERT_EQ(p.items.size(), 1u);
    if (p.items[0].id == 1) first_run_of_1 = static_cast<int64_t>(now);
    s.remove(p.items[0].id);  // it finishes at once
  }
  // Priority 3 has aged to below a fresh 0 once it has waited ~3 s.
  EXPECT_GE(first_run_of_1, 3000);
  EXPECT_LE(first_run_of_1, 3200);
  EXPECT_EQ(blocks.n_free_blocks(), 100);  // every removed request gave its blocks back
}

TEST(Scheduler, PreemptsTheRequestThatWouldRunLastWhenBlocksRunOut) {
  SchedulerConfig c;
  BlockManager blocks(2, 4);
  Scheduler s(c, blocks);
  add(s, 1, 4, 0);
  add(s, 2, 4, 1);
  StepPlan p = s.plan(2);  // exactly one block each
  ASSERT_EQ(p.items.size(), 2u);
  run(s, p);
  // Each now needs a fifth token: a new block, and none is free. The newer
  // request is preempted (its block freed, requeued to recompute); the older continues.
  p = s.plan(3);
  ASSERT_EQ(p.preempted.size(), 1u);
  EXPECT_EQ(p.preempted[0], 2);
  EXPECT_EQ(tokens_of(p, 1), 1);
  EXPECT_EQ(blocks.held_blocks(1), 2);
  EXPECT_EQ(blocks.held_blocks(2), 0);
  const Request* r2 = s.find(2);
  EXPECT_FALSE(r2->running);
  EXPECT_EQ(r2->num_computed_tokens, 0);
  EXPECT_EQ(r2->num_tokens(), 5);  // prompt + the token it generated: recomputed later
}

// Pipelining across steps: a request whose step is in flight is neither
// planned again nor preempted, even by an urgent arrival that then waits.
TEST(Scheduler, RequestsInFlightAreNeitherPlannedNorPreempted) {
  SchedulerConfig c;
  c.policy = SchedulingPolicy::Priority;
  BlockManager blocks(2, 4);
  Scheduler s(c, blocks);
  add(s, 1, 8, 0, 0);
  run(s, s.plan(1));  // request 1 holds both blocks and decodes next
  s.find(1)->in_flight = true;
  EXPECT_EQ(s.n_plannable(), 0);
  EXPECT_TRUE(s.plan(2).items.empty());
  add(s, 2, 4, 3, -10);  // urgent: would preempt request 1 were it not in flight
  EXPECT_EQ(s.n_plannable(), 1);
  StepPlan p = s.plan(4);
  EXPECT_TRUE(p.preempted.empty());
  EXPECT_TRUE(p.items.empty());  // waits for blocks
  EXPECT_EQ(blocks.held_blocks(1), 2);
  s.find(1)->in_flight = false;  // landed: now it can be preempted
  p = s.plan(5);
  EXPECT_EQ(p.preempted, std::vector<int64_t>{1});
  EXPECT_EQ(tokens_of(p, 2), 4);
}

// Each step in flight takes a share of the requests: plan() caps them.
TEST(Scheduler, PlanTakesAtMostTheRequestsAskedFor) {
  SchedulerConfig c;
  c.max_batch_size = 8;
  BlockManager blocks(100, 16);
  Scheduler s(c, blocks);
  for (int id = 1; id <= 5; id++) add(s, id, 10, id);
  StepPlan p = s.plan(10, 3);
  ASSERT_EQ(p.items.size(), 3u);
  EXPECT_EQ(p.items[0].id, 1);  // the earliest arrivals
  EXPECT_EQ(p.items[2].id, 3);
  for (const auto& it : p.items) s.find(it.id)->in_flight = true;
  p = s.plan(11, 3);  // the rest, without those in flight
  ASSERT_EQ(p.items.size(), 2u);
  EXPECT_EQ(p.items[0].id, 4);
  EXPECT_EQ(p.items[1].id, 5);
  EXPECT_TRUE(s.plan(12, 0).items.empty());
}

TEST(Scheduler, AHigherPriorityArrivalPreemptsUnderThePriorityPolicyOnly) {
  for (auto policy : {SchedulingPolicy::Fcfs, SchedulingPolicy::Priority}) {
    SchedulerConfig c;
    c.policy = policy;
    BlockManager blocks(2, 4);
    Scheduler s(c, blocks);
    add(s, 1, 8, 0, 0);
    run(s, s.plan(1));         // request 1 holds both blocks
    add(s, 2, 4, 2, -10);      // urgent
    const StepPlan p = s.plan(3);
    if (policy == SchedulingPolicy::Priority) {
      EXPECT_EQ(p.preempted, std::vector<int64_t>{1});
      EXPECT_EQ(tokens_of(p, 2), 4);
    } else {
      EXPECT_TRUE(p.preempted.empty());
      EXPECT_EQ(tokens_of(p, 2), 0);  // waits for blocks
    }
  }
}

// A sliding-window model: the blocks a later prompt's first computed token still sees are named before the step
// that computed them lets them leave this sequence's window (they were released unnamed, so a prompt whose end
// fell past the next block boundary found no hit: 0 of Gemma 4's image prompt of 157 tokens, window 8).
TEST(Scheduler, SlidingWindowBlocksAreNamedBeforeTheyLeaveTheWindow) {
  SchedulerConfig c;
  BlockManager blocks(16, 4, 0, /*sliding_window=*/2);
  Scheduler s(c, blocks);
  add(s, 1, 15, 0, 0, /*same=*/1);  // one step: tokens 0..14; its window at 15 is 13..14 (block 3)
  run(s, s.plan(1));
  s.remove(1);
  // The same text: three full blocks cover 0..11; the first computed token, 12, sees 10..12: block 2, which left
  // request 1's window with that step.
  add(s, 2, 15, 2, 0, /*same=*/1);
  const StepPlan p = s.plan(3);
  EXPECT_EQ(p.hit_prefix_blocks, 3);
  EXPECT_EQ(s.find(2)->num_cached_tokens, 12);
  EXPECT_EQ(tokens_of(p, 2), 3);
}

// What the old planner could not see: blocks a new request shares cost
// nothing, and cached blocks nobody holds are free to be taken.
TEST(Scheduler, SharedPrefixBlocksAreCountedAsTheyAre) {
  SchedulerConfig c;
  BlockManager blocks(4, 4);
  Scheduler s(c, blocks);
  add(s, 1, 9, 0, 0, /*same=*/1);
  run(s, s.plan(1));  // 3 blocks, two of them full and named
  ASSERT_EQ(blocks.n_free_blocks(), 1);
  // Same 9-token text: shares the two full blocks and needs one more block of its own.
  add(s, 2, 9, 2, 0, /*same=*/1);
  StepPlan p = s.plan(3);
  EXPECT_TRUE(p.preempted.empty());
  EXPECT_EQ(tokens_of(p, 2), 1);  // only the last token is computed
  EXPECT_EQ(p.hit_prefix_blocks, 2);
  EXPECT_EQ(s.find(2)->num_cached_tokens, 8);
  EXPECT_EQ(blocks.n_free_blocks(), 0);
  run(s, p);
  s.remove(1);
  s.remove(2);
  EXPECT_EQ(blocks.n_free_blocks(), 4);  // freed, two of them still named (cached)
  EXPECT_EQ(blocks.n_cached_blocks(), 2);
  // A request that cannot be admitted leaves nothing attached.
  BlockManager small(2, 4);
  Scheduler t(c, small);
  add(t, 1, 8, 0);
  run(t, t.plan(1));  // both blocks
  add(t, 2, 4, 1);
  EXPECT_EQ(tokens_of(t.plan(2), 2), 0);
  EXPECT_EQ(small.length(2), 0);
}

TEST(Scheduler, DraftsTakeWhatIsLeftOfTheBudgetAndFreeBlocksOnly) {
  SchedulerConfig c;
  c.max_batch_tokens = 8;
  BlockManager blocks(3, 4);
  Scheduler s(c, blocks);
  add(s, 1, 3, 0);
  add(s, 2, 3, 1);
  run(s, s.plan(1));  // both prefilled: one block each, 4 tokens to hold after sampling
  s.find(1)->draft_want = 5;
  s.find(2)->draft_want = 5;
  StepPlan p = s.plan(2);
  ASSERT_EQ(p.items.size(), 2u);
  // Budget 8: two decode tokens, then 6 for drafts. Request 1 (position 3)
  // can take 4 positions (4..7) within its block plus the one free block;
  // request 2 then finds no free block for a draft past its first.
  EXPECT_EQ(p.items[0].draft_slots, 4);
  EXPECT_EQ(p.items[1].draft_slots, 0);
  EXPECT_TRUE(p.preempted.empty());  // drafts never preempt
  EXPECT_EQ(blocks.length(1), 8);
  // The step rejects request 1's drafts: their positions, and the block they took, go back.
  Request* r1 = s.find(1);
  r1->tokens.push_back(7);
  s.find(2)->tokens.push_back(7);
  s.update({{1, 4}, {2, 4}});
  EXPECT_EQ(blocks.length(1), 4);
  EXPECT_EQ(r1->num_computed_tokens, 4);
  EXPECT_EQ(blocks.n_free_blocks(), 1);
}

TEST(Scheduler, BatchWindowWaitsForMoreRequestsUnlessUrgent) {
  SchedulerConfig c;
  c.max_wait_ms = 50;
  BlockManager blocks(100, 16);
  Scheduler s(c, blocks);
  add(s, 1, 4, 0);
  StepPlan p = s.plan(10);
  EXPECT_TRUE(p.items.empty());
  EXPECT_DOUBLE_EQ(p.wait_ms, 40);
  add(s, 2, 4, 12, -1);  // high priority: no waiting
  p = s.plan(12);
  EXPECT_EQ(p.items.size(), 2u);

  BlockManager more(100, 16);
  Scheduler t(c, more);
  add(t, 1, 4, 0);
  EXPECT_EQ(t.plan(60).items.size(), 1u);  // the window has passed
}

TEST(Scheduler, EveryRunningRequestDecodesEachStep) {
  SchedulerConfig c;
  c.max_batch_size = 8;
  BlockManager blocks(100, 16);
  Scheduler s(c, blocks);
  for (int i = 0; i < 8; i++) add(s, i, 3, i);
  run(s, s.plan(10));
  for (int step = 0; step < 10; step++) {
    const StepPlan p = s.plan(11 + step);
    ASSERT_EQ(p.items.size(), 8u);  // fair: nobody skips a step
    run(s, p);
  }
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {

// A linear-attention model: every running request holds a recurrent-state slot. With the slots taken a new
// request waits though blocks are free; a preempted request gives its slot back with its blocks (and
// recomputes from position 0 later).
// (Prefix caching off here: with it a prefill also stops at the prompt's last block boundary, for its snapshot.)
void add_uncached(Scheduler& s, int64_t id, int64_t n, double arrival, int priority = 0) {
  auto r = std::make_unique<Request>();
  r->id = id;
  r->seq = static_cast<int32_t>(id);
  r->arrival_ms = arrival;
  r->params.priority = priority;
  r->params.prefix_cache = false;
  r->params.prompt = prompt(id, n);
  s.add(std::move(r));
}

TEST(Scheduler, RecurrentStateSlotsLimitTheRunningRequests) {
  {
    SchedulerConfig c;
    BlockManager blocks(1000, 16, 0, 0, 0, /*state_slots=*/2);
    Scheduler s(c, blocks);
    add_uncached(s, 1, 8, 0);
    add_uncached(s, 2, 8, 1);
    add_uncached(s, 3, 4, 2);
    const StepPlan& p = s.plan(3);
    EXPECT_EQ(tokens_of(p, 1), 8);
    EXPECT_EQ(tokens_of(p, 2), 8);
    EXPECT_EQ(tokens_of(p, 3), 0);  // no slot
    run(s, p);
    s.remove(1);
    EXPECT_EQ(tokens_of(s.plan(4), 3), 4);  // 1's slot
  }
  {
    SchedulerConfig c;
    c.policy = SchedulingPolicy::Priority;
    BlockManager blocks(2, 4, 0, 0, 0, /*state_slots=*/1);
    Scheduler s(c, blocks);
    add_uncached(s, 1, 8, 0);
    run(s, s.plan(1));              // request 1 holds both blocks and the slot
    add_uncached(s, 2, 4, 2, -10);  // urgent
    const StepPlan p = s.plan(3);
    EXPECT_EQ(p.preempted, std::vector<int64_t>{1});
    EXPECT_EQ(tokens_of(p, 2), 4);
    EXPECT_EQ(blocks.state_slot(1), -1);
    EXPECT_EQ(blocks.state_slot(2), 0);
  }
}

// With prefix caching a linear-attention prefill stops once at the prompt's last block boundary (15 of a
// 20-token prompt: 16); the step that ends there snapshots the state, and a later equal prompt starts from it.
TEST(Scheduler, RecurrentPrefillsStopAtTheLastSharedBoundaryForTheirSnapshot) {
  SchedulerConfig c;
  BlockManager blocks(1000, 8, 0, 0, 0, /*state_slots=*/2);
  Scheduler s(c, blocks);
  add(s, 1, 20, 0, 0, /*same=*/5);
  const StepPlan& p1 = s.plan(1);
  EXPECT_EQ(tokens_of(p1, 1), 16);
  std::vector<StepOutcome> out = {{1, 16}};
  const auto& copies = s.update(out);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_TRUE(copies[0].has_state && copies[0].state.save);
  EXPECT_EQ(copies[0].state.pos, 16);
  EXPECT_EQ(tokens_of(s.plan(2), 1), 4);
  add(s, 2, 20, 3, 0, /*same=*/5);
  const StepPlan& p3 = s.plan(4);
  ASSERT_EQ(p3.state_copies.size(), 1u);
  EXPECT_FALSE(p3.state_copies[0].state.save);
  EXPECT_EQ(p3.state_copies[0].state.pos, 16);
  EXPECT_EQ(s.find(2)->num_cached_tokens, 16);
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {

// A media span attended both ways (an image's rows) is never cut by a prefill chunk: a chunk that would end
// inside it stops before it, the span then goes whole in a later step (with what the budget leaves), and a
// span a step could never take waits rather than being split. A causal span may be cut.
TEST(Scheduler, PrefillChunksNeverEndInsideAnImageAttendedBothWays) {
  SchedulerConfig c;
  c.max_batch_tokens = 64;
  c.prefill_chunk = 40;
  c.max_batch_size = 4;
  BlockManager blocks(1000, 16);
  Scheduler s(c, blocks);
  auto r = std::make_unique<Request>();
  r->id = 1;
  r->seq = 1;
  r->params.prompt = prompt(1, 100);
  MediaSpan img;
  img.start = 30;  // rows [30, 60)
  img.n_tokens = 30;
  img.both_ways = true;
  r->params.media = {img};
  s.add(std::move(r));
  StepPlan p = s.plan(0);
  EXPECT_EQ(tokens_of(p, 1), 30);  // 40 would end at 40, inside [30, 60): stops at 30
  run(s, p);
  p = s.plan(1);
  EXPECT_EQ(tokens_of(p, 1), 40);  // [30, 70): the image whole, then text
  run(s, p);
  p = s.plan(2);
  EXPECT_EQ(tokens_of(p, 1), 30);
  // The same span attended causally is cut like text.
  Scheduler s2(c, blocks);
  auto q = std::make_unique<Request>();
  q->id = 2;
  q->seq = 2;
  q->params.prompt = prompt(2, 100);
  img.both_ways = false;
  q->params.media = {img};
  s2.add(std::move(q));
  EXPECT_EQ(tokens_of(s2.plan(0), 2), 40);
}

}  // namespace
}  // namespace kestrel

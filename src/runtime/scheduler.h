#pragma once
// The serving scheduler: pure logic, no tensors, threads or sockets. It owns
// the request records (runtime/request.h) and drives the KV ledger (BlockManager) itself, as
// vLLM v1's does: each step plan() decides which requests run how many
// tokens — one decode token for every running request whose prompt is
// done, prefill chunks for the rest, drafted tokens with what is left of the
// budget — under a token budget and a sequence cap; it attaches cached
// prefixes, allocates the blocks the step will write and preempts the
// request that would run last when blocks run out. The executor runs the
// step and reports back with update(); nobody else allocates. Unit-tested
// with fake costs (tests/unit/test_scheduler.cpp).
#include <climits>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kv/block_manager.h"
#include "runtime/request.h"

namespace kestrel {

enum class SchedulingPolicy { Fcfs, Priority };

struct SchedulerConfig {
  int64_t max_batch_tokens = 512;  // tokens per step, all requests (and their drafts) together
  int max_batch_size = 16;         // requests per step
  int64_t prefill_chunk = 256;     // prompt tokens per request per step (chunked prefill)
  SchedulingPolicy policy = SchedulingPolicy::Fcfs;
  // Priority policy: a waiting request's priority improves by one per
  // aging_ms waited, so low priorities cannot starve.
  double aging_ms = 2000.0;
  // While the engine is idle, a batch may wait up to max_wait_ms for more
  // requests to arrive before it starts (0: never wait); a request with a
  // priority below zero starts at once.
  double max_wait_ms = 0.0;
};

struct StepPlan {
  struct Item {
    int64_t id;
    int32_t seq;
    int64_t first;     // position of its first token this step (= its computed tokens)
    int64_t n_tokens;  // prefill chunk, or 1 for a decode step
    bool logits;       // its last token is the sequence's last: sample from it
    int draft_slots;   // positions allocated after it for drafted tokens (decode only)
  };
  std::vector<Item> items;
  std::vector<int64_t> preempted;  // running requests evicted (their KV freed, requeued for recompute)
  // Recurrent state restored from prefix snapshots for this step's prefix hits: the KvStore copies them before
  // the step runs.
  std::vector<BlockCopies> state_copies;
  double wait_ms = 0;              // nothing planned because the batch window is open: look again after this
  int64_t queried_prefix_blocks = 0, hit_prefix_blocks = 0;  // prefix-cache lookups of this step's admissions
  int64_t n_tokens() const;        // request tokens (drafts not counted)
};

// What a step did to one request, for update().
// (The tokens it sampled are already appended to its record: sampling
// reads the history, drafts accepted earlier in the step included.)
struct StepOutcome {
  int64_t id;
  int64_t computed;  // tokens whose KV this step wrote and that stay (accepted drafts included)
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, BlockManager& blocks);
  const SchedulerConfig& config() const { return c_; }

  // A new request's record, waiting (its params.prompt becomes its tokens).
  // Its id must be new and its sequence id unused. Returns the record, which
  // stays put while others come and go.
  Request& add(std::unique_ptr<Request> r);
  // The same from its parts (tests, and callers with nothing else to keep).
  Request& add(int64_t id, int32_t seq, std::vector<int32_t> prompt, int priority, double arrival_ms);
  // Finished or cancelled: its blocks are freed, the record is gone.
  void remove(int64_t id);
  // The request's record, or null.
  Request* find(int64_t id);
  // Every record, in arrival order.
  const std::vector<std::unique_ptr<Request>>& requests() const { return reqs_; }
  int n_running() const;
  int n_waiting() const;

  // The next step, given the clock. Preempted requests are already requeued
  // (computed 0, holding nothing); items are running and hold their blocks.
  // (The plan is the scheduler's, valid until the next call: a step after
  // warm-up allocates nothing.) At most max_requests requests (and the
  // configured batch size); requests in flight are left out.
  const StepPlan& plan(double now_ms, int max_requests = INT_MAX);
  // Requests that a plan could take now: waiting, or running and not in flight.
  int n_plannable() const;
  // After the step: keeps what each request computed, gives back the blocks
  // of rejected drafts and names the full blocks for prefix sharing.
  // Requests removed during the step are skipped. Returns the block copies
  // (copy-on-write of shared blocks rolled back into) the KvStore must make.
  const std::vector<BlockCopies>& update(const std::vector<StepOutcome>& outcomes);

 private:
  double effective_priority(const Request& r, double now_ms) const;
  // a runs before b
  bool before(const Request& a, const Request& b, double now_ms) const;
  bool batch_window_open(double now_ms, StepPlan& p) const;
  // Attaches r's cached prefix if it is waiting, then allocates up to n_max
  // more tokens, preempting requests that would run after it if blocks run
  // short. Returns the tokens it may run (0: it waits).
  int64_t admit(Request& r, int64_t n_max, double now_ms, StepPlan& p);
  int64_t shareable_prompt(const Request& r) const;
  // n shortened so that r's next chunk does not end inside a media span attended both ways (0: it waits).
  int64_t media_cut(const Request& r, int64_t n) const;
  void evict(Request& victim, StepPlan& p);
  void plan_drafts(StepPlan& p, int64_t budget);

  SchedulerConfig c_;
  BlockManager& blocks_;
  std::vector<std::unique_ptr<Request>> reqs_;  // records stay put while others come and go
  std::vector<BlockCopies> copies_;
  StepPlan plan_;                      // reused step to step
  std::vector<Request*> order_;   // candidates of a plan, reused
  std::vector<int64_t> planned_;       // ids planned so far, reused
};

}  // namespace kestrel

#pragma once
// The serving scheduler: pure logic, no tensors, threads or sockets. Each
// step it decides which requests run how many tokens — one decode token for
// every running request whose prompt is done, prefill chunks for the rest —
// under a token budget, a sequence cap and the KV blocks available, and
// which running requests to preempt when blocks run out. Unit-tested with
// fake costs (tests/unit/test_scheduler.cpp).
#include <cstdint>
#include <string>
#include <vector>

namespace kestrel {

enum class SchedulingPolicy { Fcfs, Priority };

struct SchedulerConfig {
  int64_t max_batch_tokens = 512;  // tokens per step, all requests together
  int max_batch_size = 16;         // requests per step
  int64_t prefill_chunk = 256;     // prompt tokens per request per step (chunked prefill)
  int block_size = 16;             // KV cache block size, for the block arithmetic
  SchedulingPolicy policy = SchedulingPolicy::Fcfs;
  // Priority policy: a waiting request's priority improves by one per
  // aging_ms waited, so low priorities cannot starve.
  double aging_ms = 2000.0;
  // While the engine is idle, a batch may wait up to max_wait_ms for more
  // requests to arrive before it starts (0: never wait); a request with a
  // priority below zero starts at once.
  double max_wait_ms = 0.0;
};

struct SchedRequest {
  int64_t id = 0;
  int priority = 0;  // lower runs earlier (as vLLM)
  double arrival_ms = 0;
  int64_t prompt_tokens = 0;  // tokens to prefill (after a preemption: prompt + generated so far)
  int64_t computed = 0;       // of those, tokens whose KV is in the cache
  int64_t kv_blocks = 0;      // blocks the request holds
  bool running = false;       // admitted (holds KV); false: waiting
  bool prefill_done() const { return computed >= prompt_tokens; }
};

struct StepPlan {
  struct Item {
    int64_t id;
    int64_t n_tokens;  // prefill chunk, or 1 for a decode step
    bool prefill;
  };
  std::vector<Item> items;
  std::vector<int64_t> preempted;  // running requests to evict (their KV freed, requeued for recompute)
  double wait_ms = 0;              // nothing planned because the batch window is open: look again after this
  int64_t n_tokens() const;
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerConfig& config);
  const SchedulerConfig& config() const { return c_; }

  void add(const SchedRequest& r);  // a new request, waiting
  void remove(int64_t id);          // finished or cancelled
  SchedRequest* find(int64_t id);
  const std::vector<SchedRequest>& requests() const { return reqs_; }
  int n_running() const;
  int n_waiting() const;

  // The next step, given the clock and the KV blocks free now. Preempted
  // requests are already requeued (computed 0, holding nothing); items are
  // already counted as running.
  StepPlan plan(double now_ms, int64_t free_blocks);
  // After the step: the tokens each item computed, and the blocks the
  // request now holds (prefix sharing may have given it more tokens for free).
  void advance(int64_t id, int64_t computed, int64_t kv_blocks);
  // Grows a finished prefill into a decode: the sampled token is one more token to feed.
  void add_generated(int64_t id);

  // Blocks needed to hold n tokens.
  int64_t blocks_for(int64_t n) const { return (n + c_.block_size - 1) / c_.block_size; }

 private:
  double effective_priority(const SchedRequest& r, double now_ms) const;
  // a runs before b
  bool before(const SchedRequest& a, const SchedRequest& b, double now_ms) const;

  SchedulerConfig c_;
  std::vector<SchedRequest> reqs_;
};

}  // namespace kestrel

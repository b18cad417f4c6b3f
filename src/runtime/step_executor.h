#pragma once
// One step of batched generation, the same for `run` (one request) and
// `serve` (many): plan (the scheduler picks the rows and allocates the KV
// positions they write) -> propose (drafts into the planned slots) ->
// forward -> sample and verify -> update (what each request computed goes
// back to the scheduler). What a token means for the client — text, events,
// logprobs, metrics — is the front's (generator.cpp, serving_engine.cpp),
// told through StepHooks.
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "grammar/token_constraint.h"
#include "runtime/draft_length.h"
#include "runtime/loaded_model.h"
#include "runtime/proposer.h"
#include "runtime/sampler.h"
#include "runtime/scheduler.h"
#include "runtime/spec_governor.h"

namespace kestrel {

struct ExecConfig {
  SchedulerConfig scheduler;
  // Speculative decoding: up to this many drafted tokens per decoding
  // request and step, from `proposer` (required then; 0: off).
  int spec_draft_max = 0;
  Proposer* proposer = nullptr;
  bool spec_governed = false;  // stop drafting while decode steps measure slower (spec_governor.h)
  // Requests may ask for the logits of every prompt position (`run --all-logits`, perplexity-style
  // callers): logits buffers are then sized for a whole batch.
  bool all_logits = false;
  // Keep the proposer's state of a finished request's sequence (`run`: the
  // next generation on sequence 0 reuses what a draft model cached).
  bool keep_proposer_state = false;
};

struct ExecRequest {
  int64_t id = 0;
  int32_t seq = 0;
  std::vector<int32_t> prompt;  // at least one token
  int priority = 0;
  double arrival_ms = 0;
  SamplingParams sampling;
  int64_t max_tokens = 16;  // generated tokens at most (0: prefill only)
  // The request ends when prompt + generated reach this (0: the context).
  int64_t max_total_tokens = 0;
  bool ignore_eos = false;
  bool all_logits = false;    // logits of every prompt position go to StepHooks::on_prompt_logits
  bool prefix_cache = true;   // may start from cached blocks of an equal prefix
  // Structured output: tokens the grammar does not allow are masked before
  // every sampling, drafts included (the request's own state, moved past each
  // token taken). The request ends when the grammar can take nothing more.
  std::shared_ptr<TokenConstraint> constraint;
};

enum class EndReason { Eos, Stop, Length, Context };

class StepHooks {
 public:
  virtual ~StepHooks() = default;
  // The request's first step is planned: it leaves the queue.
  virtual void on_scheduled(int64_t id) {}
  // The logits of a prompt position before the last (requests with all_logits).
  virtual void on_prompt_logits(int64_t id, const float* row) {}
  // A row about to be sampled: its raw logits (the sampler then rewrites them in place).
  virtual void on_row(int64_t id, const float* row) {}
  // The request's row verifies n drafted tokens this step (before any is sampled).
  virtual void on_drafts(int64_t id, int n) {}
  // A token was generated (appended to the request's tokens); accepted: it
  // was the proposer's draft. False: the request stops with it (a stop string).
  virtual bool on_token(int64_t id, int32_t token, bool accepted) = 0;
  // The request ended; it is gone from the executor when this returns.
  virtual void on_end(int64_t id, EndReason reason) = 0;
};

// What a step did, for the front's gauges and counters.
struct StepReport {
  bool ran = false;     // a forward step ran
  double wait_ms = 0;   // nothing planned: the batch window is open for this long
  int rows = 0;         // requests in the step
  int64_t batch_tokens = 0;
  int preempted = 0;
  int pipelined = 0;  // steps started while another was in flight
  int64_t queried_prefix_blocks = 0, hit_prefix_blocks = 0;
};

class StepExecutor {
 public:
  StepExecutor(LoadedModel& engine, const ExecConfig& config);

  void add(const ExecRequest& r);
  // Ends a request from outside (cancelled): its blocks are freed; no hook is called.
  void remove(int64_t id);
  const SchedRequest* record(int64_t id) { return sched_.find(id); }
  int n_running() const { return sched_.n_running(); }
  int n_waiting() const { return sched_.n_waiting(); }
  // Blocks a request of n tokens needs (to refuse one that could never fit).
  int64_t blocks_for(int64_t n_tokens) const { return e_.kv->blocks().blocks_for(n_tokens); }

  StepReport step(double now_ms, StepHooks& hooks);

 private:
  struct Request {
    ExecRequest spec;
    SchedRequest* rec = nullptr;
    std::unique_ptr<Sampler> sampler;
    std::unique_ptr<DraftLength> draft_length;
    bool scheduled = false;
    int64_t generated() const { return rec->num_tokens() - static_cast<int64_t>(spec.prompt.size()); }
  };
  struct Row {  // one request's part of a step's batch
    Request* r;  // (looked up again by id when a step in flight lands: it may be gone)
    int64_t id;
    int64_t first, n;            // positions [first, first + n)
    bool logits;                 // its last position is the sequence's last: sample from it
    bool all_logits;             // every prompt row has logits (the request's, kept here: it may be gone at landing)
    int draft_slots;             // positions the plan allocated for drafts after it
    std::vector<int32_t> draft;  // drafted tokens after it
    int64_t batch_first;         // batch index of its first token
    int64_t draft_first;         // ...and of its first draft (-1: none)
    int64_t first_logits_row = 0;  // its rows' logits: all prompt rows (all_logits) or the last
    int64_t logits_row = -1, draft_logits_row = -1;
  };

  // A started step: its batch and rows stay here until it lands.
  struct Flight {
    explicit Flight(int64_t max_tokens) : place(max_tokens) {}
    Batch batch;
    BatchPlacement place;  // where the plan put its rows in the cache
    std::vector<Row> rows;
    bool decode_only = false;  // every row a decoding request's (the governor times these)
    double start_s = 0;
  };

  void set_draft_wants();
  // Plans the next step over the requests not in flight and starts it; false: nothing to run.
  bool launch(double now_ms, int slot, StepHooks& hooks, StepReport& report);
  // Finishes the oldest step in flight: its logits, sampling, the scheduler's update.
  void land(StepHooks& hooks, StepReport& report);
  void build_batch(const StepPlan& plan, Flight& f, StepHooks& hooks);
  void add_drafts(Flight& f);
  void observe_hidden(const Flight& f);
  void assign_logits_rows(Flight& f);
  // Samples the row's token and each draft while the picks agree. False: the request ended.
  bool verify(Row& row, StepHooks& hooks, int64_t& computed, int64_t& sampled);
  // Appends a sampled token; false when the request ended (and is gone).
  bool take(Request& r, int32_t tok, bool accepted, StepHooks& hooks);
  void end(Request& r, EndReason reason, StepHooks& hooks);

  LoadedModel& e_;
  ExecConfig c_;
  Proposer* proposer_;
  Scheduler sched_;
  SpecGovernor governor_{8, 128};  // decode steps only: probes of 8 steps, then 128 in the faster mode
  std::unordered_map<int64_t, std::unique_ptr<Request>> reqs_;
  // Steps in flight at most: the model's (pipelining across pipeline
  // stages), 1 with a proposer (drafts read the tokens of the step before).
  int depth_ = 1;
  std::vector<Flight> flights_;  // one per slot
  std::vector<int> in_flight_;   // slots of started steps, oldest first
  std::vector<float> logits_, hidden_;
  std::vector<StepOutcome> outcomes_;  // reused: a step after warm-up allocates nothing
};

}  // namespace kestrel

#pragma once
// One step of batched generation, the same for `run` (one request) and
// `serve` (many): plan (the scheduler picks the rows and allocates the KV
// positions they write) -> propose (drafts into the planned slots) ->
// forward -> sample and verify -> update (what each request computed goes
// back to the scheduler). Each step returns what it did to each request —
// its new tokens with their logprobs, the logits rows it asked for, how it
// ended — and the front (generator.cpp for `run`, serving_engine.cpp) reads
// that after the step. The executor alone decides when a request ends: EOS,
// the length and context limits, the grammar's end and stop strings (it
// detokenizes the reply for that: TokenOutput::text), each with its
// FinishReason; what the text means for the client (events, API formats,
// metrics) is the front's.
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
  // callers, a server's echoed prompt logprobs): with this the logits buffer is sized for a whole batch
  // from the start; without it, it grows for a step that needs more rows (and goes back after).
  bool all_logits = false;
  // Keep the proposer's state of a finished request's sequence (`run`: the
  // next generation on sequence 0 reuses what a draft model cached).
  bool keep_proposer_state = false;
};

// A token a step gave a request.
struct TokenOutput {
  int32_t token = 0;
  bool accepted = false;         // a drafted token the verification kept
  float logprob = 0;             // with params.top_logprobs >= 0: its raw log-probability (RawLogprobs)
  std::vector<TokenChoice> top;  // ...and the top_logprobs most likely tokens of its row
  std::string text;              // with params.text: the text this token made final (may be empty)
  bool end_token = false;        // the end-of-generation token (params.logprob_end_token): no text, not generated
};

// What a step did to one request, in the order it happened.
struct RequestOutput {
  int64_t id = 0;
  bool started = false;  // its first step was planned (it left the queue)
  int drafted = 0;       // drafted tokens it verified
  std::vector<TokenOutput> tokens;
  // With params.all_logits: the raw logits of every position this step
  // computed for it (prompt rows, then each row it sampled from), n_vocab each.
  std::vector<float> logits;
  int64_t logits_first = -1;  // the position whose logits come first there (the rows are consecutive positions)
  // With params.want_hidden: every row's final (normed) hidden state this step computed for it, hidden_dim each,
  // from position hidden_first on.
  std::vector<float> hidden;
  int64_t hidden_first = -1;
  bool finished = false;  // it ended (and is gone from the executor)
  FinishReason finish = FinishReason::Length;
  // With params.text and finished: the text held back until the end (after the last token's), and the stop
  // string that ended it (FinishReason::Stop).
  std::string end_text, stop_string;
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;  // with finished
  std::shared_ptr<RequestAttachment> attachment;  // with finished: the record's (Request::attachment), handed back
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
  // Per request the step touched (valid until the next step): every request it ran, a prefill chunk too.
  const std::vector<RequestOutput>* outputs = nullptr;
  size_t n_outputs = 0;
  const RequestOutput* begin() const { return outputs->data(); }
  const RequestOutput* end() const { return outputs->data() + n_outputs; }
};

class StepExecutor {
 public:
  StepExecutor(LoadedModel& engine, const ExecConfig& config);

  // A new request: its record (id, seq, arrival and params set; the
  // executor adds its sampling state), which the scheduler keeps from now on.
  // Returns it.
  const Request& add(std::unique_ptr<Request> r);
  // Ends a request from outside (cancelled, a client gone): its blocks are freed and its record is gone; no
  // output says so. Returns its text held back so far (params.text), for a front that shows it.
  std::string remove(int64_t id);
  const Request* record(int64_t id) { return sched_.find(id); }
  // Every request it keeps (waiting or running).
  const std::vector<std::unique_ptr<Request>>& records() const { return sched_.requests(); }
  int n_running() const { return sched_.n_running(); }
  int n_waiting() const { return sched_.n_waiting(); }
  // Blocks a request of n tokens needs (to refuse one that could never fit).
  int64_t blocks_for(int64_t n_tokens) const { return e_.kv->blocks().blocks_for(n_tokens); }

  // Runs a step; its report's outputs say what it did to each request.
  StepReport step(double now_ms);

 private:
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
    bool want_hidden = false;  // its rows' final hidden states go to its output (the request's, kept here)
  };

  // A started step: its batch and rows stay here until it lands.
  struct Flight {
    explicit Flight(int64_t max_tokens) : place(max_tokens) {}
    Batch batch;
    BatchPlacement place;  // where the plan put its rows in the cache
    std::vector<Row> rows;
    bool decode_only = false;  // every row a decoding request's (the governor times these)
    std::vector<int32_t> best_ids;  // Batch::best: the rows' best candidates
    std::vector<float> best_vals;
    double start_s = 0;
  };

  void set_draft_wants();
  // Plans the next step over the requests not in flight and starts it; false: nothing to run.
  bool launch(double now_ms, int slot, StepReport& report);
  // Finishes the oldest step in flight: its logits, sampling, the scheduler's update.
  void land(StepReport& report);
  void check_media(const RequestParams& p) const;
  void build_batch(const StepPlan& plan, Flight& f);
  void add_media_rows(Batch& batch, const MediaSpan& m, int64_t first, int64_t end, int64_t row0);
  void set_lora_rows(Flight& f);
  void set_horizons(Batch& batch);
  void set_rope_positions(Batch& batch);
  void add_drafts(Flight& f);
  void observe_hidden(const Flight& f);
  void assign_logits_rows(Flight& f);
  // Samples the row's token and each draft while the picks agree. False: the request ended.
  // best > 0: the step ran with Batch::best (the logits buffer holds each row's best candidates).
  bool sample_row(Row& row, int64_t& computed, int64_t& sampled, const Batch& batch);
  static constexpr int kMaxBest = 64;  // the most best candidates a step asks the device for (top_k above: rows)
  int32_t best_needed(const Flight& f) const;
  // The tokens whose effect stays in the cache: computed, or where a recurrent state had to go back to.
  int64_t rollback_state(const Row& row, int64_t computed);
  // Appends a sampled token; false when the request ended (and is gone).
  bool take(Request& r, RequestOutput& out, int32_t tok, bool accepted);
  // A token's output (its logprobs when asked), the text left to take() to fill.
  TokenOutput& emit(const Request& r, RequestOutput& out, int32_t tok, bool accepted);
  // params.reasoning_budget: the token to take instead of tok (the close tag's next once the budget is spent),
  // the request's place in its reasoning moved on; kept follows whether a draft still matches.
  int32_t reasoning_budget(Request& r, int32_t tok, int32_t draft, bool& kept);
  void end(Request& r, RequestOutput& out, FinishReason reason);
  // This step's output for a request (made on first use).
  RequestOutput& output(int64_t id);
  void keep_logits(RequestOutput& out, const float* row, int64_t position);

  LoadedModel& e_;
  ExecConfig c_;
  Proposer* proposer_;
  Scheduler sched_;
  SpecGovernor governor_{8, 128};  // decode steps only: probes of 8 steps, then 128 in the faster mode
  // Steps in flight at most: the model's (pipelining across pipeline
  // stages), 1 with a proposer (drafts read the tokens of the step before).
  int depth_ = 1;
  std::vector<Flight> flights_;  // one per slot
  // The batch's media rows attended both ways: (first batch row, rows, the span's last position).
  struct BothWays {
    int64_t row, n;
    int32_t last;
  };
  std::vector<BothWays> both_ways_;
  // The batch's rows of requests whose media take M-RoPE positions: (first batch row, rows, first position, media).
  struct RopeRows {
    int64_t row, n, first;
    const std::vector<MediaSpan>* media;
  };
  std::vector<RopeRows> rope_rows_;
  std::vector<int> in_flight_;   // slots of started steps, oldest first
  std::vector<float> logits_, hidden_;
  size_t base_logits_ = 0;  // the logits buffer's usual size (rows for a step without all_logits requests)
  std::vector<StepOutcome> outcomes_;    // reused: a step after warm-up allocates nothing
  std::vector<RequestOutput> outputs_;   // this step's, the first n_outputs_ (reused the same way)
  size_t n_outputs_ = 0;
  RawLogprobs logprobs_;
};

}  // namespace kestrel

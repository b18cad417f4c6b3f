#pragma once
// The engine side of the server: one thread runs steps. Requests arrive
// through submit() from any thread; each step runs through the StepExecutor
// `run` uses too (the scheduler plans which requests run how many tokens,
// one batched forward runs them all), and every request's new text goes
// back through its own channel. Nothing an HTTP thread does blocks a step,
// and a step never waits on a client.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "runtime/loaded_model.h"
#include "runtime/proposer.h"
#include "runtime/sampler.h"
#include "runtime/scheduler.h"
#include "runtime/step_executor.h"
#include "runtime/text_stream.h"
#include "serving/engine/metrics.h"

namespace kestrel {

struct TokenLogprob {
  int32_t token = 0;
  std::string text;
  float logprob = 0;
};

// What a request sends back, in order: pieces of text, then one end.
struct StreamEvent {
  std::string text;  // new final text (may be empty with a token)
  bool has_token = false;
  bool prompt = false;        // an echoed prompt token (or the prompt's text): comes before any generated one
  bool null_logprob = false;  // the prompt's first token: nothing before it, so no logprob
  std::vector<float> embedding;  // a pooling request's vector (before the end event), not normalised; a reranker's scores
  TokenLogprob token;             // the token and its logprob (with logprobs)
  std::vector<TokenLogprob> top;  // the top-n alternatives (with logprobs)
  bool done = false;
  std::string finish_reason;                                            // "stop", "length", "cancelled", "error"
  std::string error;                                                    // with finish_reason "error"
  std::string stop_string;  // with finish_reason "stop": the stop string that ended it ("" for end of generation)
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;  // with done
  double queue_ms = 0, ttft_ms = 0, e2e_ms = 0;  // with done: waited, first token, last event (from arrival)
  // With done: when each step that computed prompt rows for it (a prefill chunk) ended, from arrival (at most
  // kMaxPrefillSteps); the traces' prefill steps.
  std::vector<double> prefill_steps_ms;
  static constexpr size_t kMaxPrefillSteps = 256;
};

// One request's mailbox: the engine pushes, the client side takes. A
// reader that falls behind by kMaxPending unread events (a client not
// reading its stream) cancels the request instead of growing memory.
class RequestChannel {
 public:
  static constexpr size_t kMaxPending = 4096;

  void push(StreamEvent e);
  // Waits up to timeout_ms for events; returns what is queued (maybe nothing).
  std::vector<StreamEvent> pop(int timeout_ms);
  // What is queued, without waiting.
  std::vector<StreamEvent> take() { return pop(0); }
  // `ready` is called after every push, from the pushing thread (and at
  // once if events are already waiting).
  void on_ready(std::function<void()> ready);
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }
  bool overflowed() const { return overflowed_; }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<StreamEvent> events_;
  std::function<void()> ready_;
  std::atomic<bool> cancelled_{false}, overflowed_{false};
};

// A place in the server's one queue, taken when a request arrives (before
// it is parsed or tokenized) and given back when it first runs or ends.
// Move-only; an empty slot means the queue was full.
class QueueSlot {
 public:
  QueueSlot() = default;
  explicit QueueSlot(std::atomic<int>* count) : count_(count) {}
  QueueSlot(QueueSlot&& o) noexcept : count_(o.count_) { o.count_ = nullptr; }
  QueueSlot& operator=(QueueSlot&& o) noexcept {
    if (this != &o) {
      release();
      count_ = o.count_;
      o.count_ = nullptr;
    }
    return *this;
  }
  QueueSlot(const QueueSlot&) = delete;
  QueueSlot& operator=(const QueueSlot&) = delete;
  ~QueueSlot() { release(); }
  explicit operator bool() const { return count_ != nullptr; }
  void release() {
    if (count_) count_->fetch_sub(1);
    count_ = nullptr;
  }

 private:
  std::atomic<int>* count_ = nullptr;
};

// What the server submits: the record's parameters (runtime/request.h: stop strings and shown control tokens
// there too) and what only the client side needs (the grammar the request's matcher is built from).
struct ServeRequest {
  std::chrono::steady_clock::time_point arrival = std::chrono::steady_clock::now();  // queue time counts from here
  RequestParams params;
  std::shared_ptr<const Grammar> grammar;     // structured output: only text it matches is generated
  // The prompt sent back before the generation (completions' echo): its text, and with prompt_logprobs >= 0
  // each prompt token's logprob under the model (from the prefill's rows: the request's prefill then computes
  // every row's logits and does not share cached prefix blocks) with that many alternatives.
  bool echo = false;
  int prompt_logprobs = -1;
  // An embedding: the prompt's final hidden states pooled (1 mean, 2 the first row, 3 the last; 4: the last
  // through the model's classification head, a reranker's scores; -1: not an embedding request) and sent as
  // one event; nothing is generated (max_tokens 0).
  int pooling = -1;
  // What the telemetry names the request by: gen_ai.operation.name (chat, text_completion, embeddings,
  // rerank) and gen_ai.request.model (the name the client asked for; empty: the served name).
  std::string operation = "text_completion";
  std::string model;
};

struct ServingConfig {
  // The scheduler and speculation (a draft model's cache must hold
  // scheduler.max_batch_size sequences: it drafts for every decoding request
  // of a step at once).
  ExecConfig exec;
  int max_queue = 256;  // waiting requests beyond which submit() refuses (HTTP 503)
  // Called once, from the engine thread, when steps can no longer run (a
  // tensor-parallel rank died or hangs: CommunicatorFailure). The requests
  // in flight, and any that arrive after, end with the error; the caller is
  // expected to stop the server.
  std::function<void(const std::string&)> on_fatal;
  // The prefix cache's lower tiers (already set on the KV ledger), for GET /cache and the metrics; null: none.
  PrefixTiers* tiers = nullptr;
  // llama-server's slots (--slot-save-path): this many, each remembering the tokens (prompt and reply) of the
  // last request it served; a request goes to the slot whose tokens share the longest prefix with its prompt,
  // else the least recently used one (llama-server's choice without id_slot). 0: none kept.
  int n_slots = 0;
};

// What a slot last held (ServingConfig::n_slots).
struct SlotRecord {
  std::vector<int32_t> tokens;
  int64_t used = 0;  // when it last took a request (0: never)
};

// The KV pool as GET /cache shows it (updated by the engine thread after every step).
struct PoolView {
  int64_t blocks = 0, used = 0, cached = 0, block_size = 0, bytes = 0;
  int64_t queried_tokens = 0, hit_tokens = 0, tier_hit_tokens = 0;
};

class ServingEngine {
 public:
  ServingEngine(LoadedModel& engine, const ServingConfig& config, ServerMetrics& metrics);
  ~ServingEngine();

  // A place in the queue, or an empty slot when --max-queue requests are
  // already waiting (parsed or not) or the server is shutting down.
  QueueSlot enter_queue();
  // Queues a request (validated by the caller against the context) in the
  // place it holds. Returns its channel. Throws Error when it can never fit
  // in the KV cache.
  std::shared_ptr<RequestChannel> submit(QueueSlot slot, ServeRequest r);
  // Both at once: null when the queue is full.
  std::shared_ptr<RequestChannel> submit(ServeRequest r);
  // Requests waiting: arrived (even if not parsed yet) and not yet run.
  int queued() const { return queued_.load(); }
  int max_queue() const { return c_.max_queue; }
  // Stops taking requests; in-flight ones finish until the deadline, then
  // are cancelled. Joins the engine thread.
  void shutdown(int deadline_ms);

  int64_t n_ctx() const { return e_.n_ctx; }
  const LoadedModel& engine() const { return e_; }
  PrefixTiers* tiers() const { return c_.tiers; }
  PoolView pool_view() const;
  // Runs fn on the engine thread between two steps (where the KV ledger and rows may be read and changed) and
  // waits for it; fn's exception comes back here. With the engine stopped: runs nothing, throws Error.
  void between_steps(const std::function<void(LoadedModel& e, std::vector<SlotRecord>& slots)>& fn);

 private:
  // A request's client side: what the server owes its client (its channel, its place in the queue, the echo or
  // pooling it asked for, the counts and times its end reports). It is part of the request's one record — the
  // executor's Request (runtime/request.h), whose attachment it is from admission: read through the record
  // while the request runs, handed back in the output that ends it. (The runtime layer cannot name a serving
  // channel: the record holds it as a RequestAttachment.)
  struct Active : RequestAttachment {
    int64_t n_prompt = 0;
    int pooling = -1;          // ServeRequest::pooling
    int prompt_logprobs = -1;  // ServeRequest::prompt_logprobs (echo)
    bool logprobs = false;     // each token's logprob and alternatives in its event
    std::shared_ptr<RequestChannel> channel;
    QueueSlot slot;  // held until the first step
    std::unique_ptr<TextStream> echo_text;  // echo: the prompt's text, token by token
    std::vector<int32_t> echo_prompt;       // echo with prompt logprobs: the prompt (the record holds the other copy)
    int64_t echo_next = 0;                  // the next prompt position to send
    std::vector<double> pooled;             // an embedding: the rows pooled so far
    int64_t pool_next = 0;                  // ...and the next prompt position to take
    std::shared_ptr<TokenConstraint> constraint;  // with a grammar: its matcher (the record's too)
    int64_t completion_tokens = 0;                // tokens the client has been sent
    double arrival_ms = 0, first_step_ms = -1, first_token_ms = -1, last_token_ms = -1;
    std::string operation, model;  // ServeRequest's (the gen_ai metrics' labels)
    std::shared_ptr<const LoraSet> lora;  // its adapters (the kestrel_lora_* metrics' labels)
    std::vector<double> prefill_steps_ms;  // StreamEvent's
    std::vector<int32_t> slot_tokens;      // with slots: the prompt and the tokens generated so far
  };
  // The request's tokens into its slot (with slots).
  void keep_in_slot(Active& a);

  void loop();
  void admit_new();
  void step(double now);
  // What a step did to one request, for its client and the metrics.
  void deliver(const RequestOutput& out);
  // Echo: the prompt's tokens with their logprobs, as the prefill's rows give them.
  void echo_prompt(Active& a, const RequestOutput& out);
  // An embedding request: its prompt rows' hidden states pooled; the vector sent once the prefill ends.
  void pool_rows(Active& a, const RequestOutput& out);
  // The client side of a request's end (its event, metrics); the executor
  // has freed its record (it finished) or the caller does next (exec_.remove).
  // out: the executor's output that ended it (its held-back text and stop string); null: ended from outside.
  void finish(Active& a, const std::string& reason, const std::string& error = "", int64_t cached_tokens = 0,
              const RequestOutput* out = nullptr);
  void note_token_time(Active& a);
  // A running request's client side (null: not the executor's).
  static Active* client_of(const Request* r) { return r ? static_cast<Active*>(r->attachment.get()) : nullptr; }
  double now_ms() const;
  void update_gauges();

  LoadedModel& e_;
  ServingConfig c_;
  ServerMetrics& metrics_;
  StepExecutor exec_;
  struct Arrival {  // a submitted request and its client side, until the engine thread admits it
    ServeRequest req;
    std::unique_ptr<Active> client;
  };
  std::vector<Arrival> inbox_;  // guarded by mutex_
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<bool> accepting_{true};
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> deadline_ms_{-1};
  std::atomic<int> queued_{0};  // slots held: arrived and not yet run, for the 503 check
  std::string fatal_;             // set: no step can run any more (why)
  int64_t next_id_ = 1;
  RawLogprobs prompt_logprobs_;  // echo: one prompt row at a time
  std::chrono::steady_clock::time_point t0_;
  PoolView pool_;                    // guarded by mutex_
  struct Task {
    std::function<void(LoadedModel&, std::vector<SlotRecord>&)> fn;
    std::promise<void> done;
  };
  std::vector<Task*> tasks_;  // guarded by mutex_
  bool exiting_ = false;      // guarded by mutex_: the loop has ended
  void run_tasks();
  std::vector<SlotRecord> slots_;  // engine thread
  int64_t slot_clock_ = 0;
  PrefixTiers::Stats tier_seen_;     // the tiers' counters already added to the metrics (engine thread)
  void tier_metrics();
  std::thread thread_;
};

}  // namespace kestrel

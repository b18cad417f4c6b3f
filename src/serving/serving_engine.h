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
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "runtime/engine.h"
#include "runtime/proposer.h"
#include "runtime/sampler.h"
#include "runtime/scheduler.h"
#include "runtime/step_executor.h"
#include "runtime/text_stream.h"
#include "serving/metrics.h"

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
  TokenLogprob token;             // the token and its logprob (with logprobs)
  std::vector<TokenLogprob> top;  // the top-n alternatives (with logprobs)
  bool done = false;
  std::string finish_reason;                                            // "stop", "length", "cancelled", "error"
  std::string error;                                                    // with finish_reason "error"
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;  // with done
  double queue_ms = 0, ttft_ms = 0, e2e_ms = 0;  // with done: waited, first token, last event (from arrival)
};

// One request's mailbox: the engine pushes, the HTTP thread pops.
class RequestChannel {
 public:
  void push(StreamEvent e);
  // Waits up to timeout_ms for events; returns what is queued (maybe nothing).
  std::vector<StreamEvent> pop(int timeout_ms);
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<StreamEvent> events_;
  std::atomic<bool> cancelled_{false};
};

struct ServeRequest {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 16;
  SamplingParams sampling;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  int priority = 0;
  int top_logprobs = -1;  // -1: no logprobs; n >= 0: the chosen token's and the top n
};

struct ServingConfig {
  // The scheduler and speculation (a draft model's cache must hold
  // scheduler.max_batch_size sequences: it drafts for every decoding request
  // of a step at once).
  ExecConfig exec;
  int max_queue = 256;  // waiting requests beyond which submit() refuses (HTTP 503)
};

class ServingEngine : private StepHooks {
 public:
  ServingEngine(Engine& engine, const ServingConfig& config, ServerMetrics& metrics);
  ~ServingEngine();

  // Queues a request (validated by the caller against the context). Returns
  // its channel, or null when the queue is full. Throws Error when it can
  // never fit in the KV cache.
  std::shared_ptr<RequestChannel> submit(ServeRequest r);
  // Stops taking requests; in-flight ones finish until the deadline, then
  // are cancelled. Joins the engine thread.
  void shutdown(int deadline_ms);

  int64_t n_ctx() const { return e_.n_ctx; }
  const Engine& engine() const { return e_; }

 private:
  // What the engine keeps of a request beside the executor's (its tokens,
  // progress and sampler): the client side.
  struct Active {
    int64_t id = 0;
    int32_t seq = 0;
    ServeRequest req;
    std::shared_ptr<RequestChannel> channel;
    std::unique_ptr<TextStream> text;
    double arrival_ms = 0, first_step_ms = -1, first_token_ms = -1, last_token_ms = -1;
    std::vector<TokenLogprob> top;  // the row being sampled: its top alternatives (with logprobs)
    float lse = 0;                  // ...and the log-sum-exp of its raw logits
  };

  void loop();
  void admit_new();
  void step(double now);
  // The client side of a request's end (its event, metrics); the executor
  // frees its blocks (after on_end) or the caller does (exec_.remove).
  void finish(Active& a, const std::string& reason, const std::string& error = "");
  void note_token_time(Active& a);
  double now_ms() const;
  void update_gauges();

  // StepHooks: what a step's events mean for the client.
  void on_scheduled(int64_t id) override;
  void on_row(int64_t id, const float* row) override;
  void on_drafts(int64_t id, int n) override;
  bool on_token(int64_t id, int32_t token, bool accepted) override;
  void on_end(int64_t id, EndReason reason) override;

  Engine& e_;
  ServingConfig c_;
  ServerMetrics& metrics_;
  StepExecutor exec_;
  std::unordered_map<int64_t, std::unique_ptr<Active>> active_;
  std::vector<std::unique_ptr<Active>> inbox_;  // guarded by mutex_
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<bool> accepting_{true};
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> deadline_ms_{-1};
  std::atomic<int> queued_{0};  // inbox + waiting, for the 503 check
  int64_t next_id_ = 1;
  std::vector<float> raw_;        // a row's logits before sampling (for logprobs), reused
  std::vector<int32_t> top_ids_;  // token ids ranked for top logprobs, reused
  std::chrono::steady_clock::time_point t0_;
  std::thread thread_;
};

}  // namespace kestrel

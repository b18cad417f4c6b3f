#include "serving/serving_engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include "core/error.h"

namespace kestrel {

void RequestChannel::push(StreamEvent e) {
  {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

std::vector<StreamEvent> RequestChannel::pop(int timeout_ms) {
  std::unique_lock lock(mutex_);
  cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return !events_.empty(); });
  std::vector<StreamEvent> out(std::make_move_iterator(events_.begin()), std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

ServingEngine::ServingEngine(Engine& engine, const ServingConfig& config, ServerMetrics& metrics)
    : e_(engine), c_(config), metrics_(metrics), sched_(config.scheduler, engine.kv->blocks()),
      t0_(std::chrono::steady_clock::now()) {
  if (config.scheduler.max_batch_tokens > e_.model->max_batch_tokens())
    throw Error(fmt::format("serving: --max-batch-tokens {} exceeds the model's planned batch of {}",
                            config.scheduler.max_batch_tokens, e_.model->max_batch_tokens()));
  if (config.spec_draft_max < 0 || config.spec_draft_max > 64)
    throw Error(fmt::format("serving: draft length {} is out of range (0 to 64)", config.spec_draft_max));
  // One logits row per request, plus one per drafted token.
  logits_.resize(static_cast<size_t>(config.scheduler.max_batch_size) * (1 + config.spec_draft_max) *
                 e_.model->config().n_vocab);
  if (config.spec_draft_max > 0 && !config.proposer)
    throw Error("serving: speculative decoding needs a proposer (ServingConfig::proposer)");
  proposer_ = config.spec_draft_max > 0 ? config.proposer : nullptr;
  if (proposer_ && proposer_->wants_hidden())
    hidden_.resize(static_cast<size_t>(e_.model->max_batch_tokens() * e_.model->config().n_embd));
  metrics_.set("kestrel_kv_blocks_total", e_.kv->n_blocks());
  thread_ = std::thread([this] { loop(); });
}

ServingEngine::~ServingEngine() { shutdown(0); }

double ServingEngine::now_ms() const {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
}

std::shared_ptr<RequestChannel> ServingEngine::submit(ServeRequest r) {
  if (!accepting_) return nullptr;
  // A request must fit in the pool on its own, whole, or it could never finish.
  const int64_t need = e_.kv->blocks().blocks_for(static_cast<int64_t>(r.prompt.size()) + r.max_tokens);
  if (need > e_.kv->n_blocks())
    throw Error(
        fmt::format("the prompt ({} tokens) plus max_tokens ({}) need {} KV blocks but the cache holds {} "
                    "(lower max_tokens or raise --kv-cache-mem)",
                    r.prompt.size(), r.max_tokens, need, e_.kv->n_blocks()));
  if (queued_.load() >= c_.max_queue) return nullptr;
  auto a = std::make_unique<Active>();
  a->req = std::move(r);
  a->channel = std::make_shared<RequestChannel>();
  a->arrival_ms = now_ms();
  auto ch = a->channel;
  {
    std::lock_guard lock(mutex_);
    inbox_.push_back(std::move(a));
  }
  queued_++;
  wake_.notify_all();
  return ch;
}

void ServingEngine::shutdown(int deadline_ms) {
  accepting_ = false;
  if (!thread_.joinable()) return;
  deadline_ms_ = static_cast<int64_t>(now_ms()) + deadline_ms;
  stop_ = true;
  wake_.notify_all();
  thread_.join();
}

void ServingEngine::update_gauges() {
  metrics_.set("kestrel_requests_running", sched_.n_running());
  metrics_.set("kestrel_requests_waiting", sched_.n_waiting() + static_cast<double>(inbox_.size()));
  metrics_.set("kestrel_kv_blocks_used", e_.kv->blocks().n_used_blocks());
}

void ServingEngine::admit_new(double now) {
  std::vector<std::unique_ptr<Active>> fresh;
  {
    std::lock_guard lock(mutex_);
    fresh.swap(inbox_);
  }
  for (auto& a : fresh) {
    a->id = next_id_++;
    a->seq = static_cast<int32_t>(a->id & 0x7fffffff);
    SamplingParams sp = a->req.sampling;
    a->sampler = std::make_unique<Sampler>(sp, e_.model->config().n_vocab);
    a->text = std::make_unique<TextStream>(*e_.tokenizer, a->req.stop, a->req.prompt.back());
    if (c_.spec_draft_max > 0) a->draft_length = std::make_unique<DraftLength>(c_.spec_draft_max);
    metrics_.add("kestrel_prompt_tokens_total", static_cast<double>(a->req.prompt.size()));
    sched_.add(a->id, a->seq, a->req.prompt, a->req.priority, a->arrival_ms);
    a->rec = sched_.find(a->id);
    const int64_t id = a->id;
    active_[id] = std::move(a);
  }
  (void)now;
}

void ServingEngine::finish(Active& a, const std::string& reason, const std::string& error) {
  StreamEvent end;
  if (reason != "error" && reason != "cancelled") {
    bool stopped = false;
    end.text = a.text->finish(stopped);
  }
  end.done = true;
  end.finish_reason = reason;
  end.error = error;
  end.prompt_tokens = static_cast<int64_t>(a.req.prompt.size());
  end.completion_tokens = a.generated();
  end.cached_tokens = a.rec->num_cached_tokens;
  const double now = now_ms();
  end.queue_ms = a.first_step_ms >= 0 ? a.first_step_ms - a.arrival_ms : now - a.arrival_ms;
  end.ttft_ms = a.first_token_ms >= 0 ? a.first_token_ms - a.arrival_ms : -1;
  end.e2e_ms = now - a.arrival_ms;
  // Counted before the client can see the end: a /metrics scrape right after
  // a response must include it.
  metrics_.add("kestrel_requests_total", 1, reason);
  if (reason != "error" && reason != "cancelled")
    metrics_.observe("kestrel_e2e_request_latency_seconds", (now_ms() - a.arrival_ms) / 1000);
  a.channel->push(std::move(end));
  if (proposer_) proposer_->forget(a.seq);
  sched_.remove(a.id);  // its blocks too
  queued_ = std::max(0, queued_.load() - (a.first_step_ms < 0 ? 1 : 0));
  active_.erase(a.id);  // a is gone after this
}

bool ServingEngine::sample(Active& a, float* logits, double now, int32_t draft, bool* accepted) {
  const int64_t nv = e_.model->config().n_vocab;
  StreamEvent ev;
  float lse = 0;  // log-sum-exp of the raw logits, with logprobs
  if (a.req.top_logprobs >= 0) {
    // Log-softmax of the raw logits (before penalties and temperature), as
    // OpenAI reports them; the sampler then rewrites the row in place.
    raw_.assign(logits, logits + nv);
    const float m = *std::max_element(raw_.begin(), raw_.end());
    double sum = 0;
    for (float x : raw_) sum += std::exp(static_cast<double>(x - m));
    lse = m + static_cast<float>(std::log(sum));
    top_ids_.resize(static_cast<size_t>(nv));
    for (size_t i = 0; i < top_ids_.size(); i++) top_ids_[i] = static_cast<int32_t>(i);
    const auto n_top = std::min<size_t>(static_cast<size_t>(a.req.top_logprobs), top_ids_.size());
    std::partial_sort(top_ids_.begin(), top_ids_.begin() + static_cast<std::ptrdiff_t>(n_top), top_ids_.end(),
                      [&](int32_t x, int32_t y) { return raw_[x] > raw_[y]; });
    for (size_t i = 0; i < n_top; i++)
      ev.top.push_back({top_ids_[i], e_.tokenizer->token_to_piece(top_ids_[i]), raw_[top_ids_[i]] - lse});
  }
  bool kept = false;
  const int32_t tok = draft >= 0 ? a.sampler->sample_or_accept(logits, a.rec->tokens, draft, kept)
                               : a.sampler->sample(logits, a.rec->tokens);
  if (accepted) *accepted = kept;
  if (kept) metrics_.add("kestrel_spec_accepted_tokens_total");  // before any event of this token goes out
  if (a.first_token_ms < 0) {
    a.first_token_ms = now;
    metrics_.observe("kestrel_time_to_first_token_seconds", (now - a.arrival_ms) / 1000);
  }
  if (a.last_token_ms >= 0) metrics_.observe("kestrel_inter_token_latency_seconds", (now - a.last_token_ms) / 1000);
  a.last_token_ms = now;
  if (!a.req.ignore_eos && e_.tokenizer->vocab().is_end_of_generation(tok)) {
    finish(a, "stop");
    return false;
  }
  a.rec->tokens.push_back(tok);  // the scheduler's record: one more token to feed
  metrics_.add("kestrel_generation_tokens_total");
  bool stopped = false;
  ev.text = a.text->push(tok, stopped);
  ev.has_token = true;
  ev.token.token = tok;
  ev.token.text = e_.tokenizer->token_to_piece(tok);
  if (a.req.top_logprobs >= 0) ev.token.logprob = raw_[tok] - lse;
  a.channel->push(std::move(ev));
  if (stopped) {
    finish(a, "stop");
    return false;
  }
  if (a.generated() >= a.req.max_tokens || a.rec->num_tokens() >= e_.n_ctx) {
    finish(a, "length");
    return false;
  }
  return true;
}

void ServingEngine::set_draft_wants() {
  const bool drafting = proposer_ && (!c_.spec_governed || governor_.drafting());
  for (auto& [id, a] : active_) {
    SchedRequest& r = *a->rec;
    r.draft_want = 0;
    if (!drafting || !a->draft_length) continue;
    // After the decode token: the rest of max_tokens and of the context.
    const int64_t room = std::min({static_cast<int64_t>(a->draft_length->next()), a->req.max_tokens - a->generated() - 1,
                                   e_.n_ctx - r.num_tokens()});
    r.draft_want = static_cast<int>(std::max<int64_t>(0, room));
  }
}

void ServingEngine::step(double now) {
  set_draft_wants();
  const StepPlan plan = sched_.plan(now);
  if (!plan.preempted.empty()) metrics_.add("kestrel_preemptions_total", static_cast<double>(plan.preempted.size()));
  metrics_.add("kestrel_prefix_cache_queries_total", static_cast<double>(plan.queried_prefix_blocks));
  metrics_.add("kestrel_prefix_cache_hits_total", static_cast<double>(plan.hit_prefix_blocks));
  if (plan.items.empty()) {
    if (plan.wait_ms > 0) {
      std::unique_lock lock(mutex_);
      wake_.wait_for(lock, std::chrono::duration<double, std::milli>(plan.wait_ms),
                     [&] { return !inbox_.empty() || stop_; });
    }
    return;
  }
  Batch batch;
  std::vector<Row> rows;
  for (const auto& item : plan.items) {
    Active& a = *active_.at(item.id);
    if (a.first_step_ms < 0) {
      a.first_step_ms = now;
      metrics_.observe("kestrel_request_queue_time_seconds", (now - a.arrival_ms) / 1000);
      queued_ = std::max(0, queued_.load() - 1);
    }
    const int64_t last = item.first + item.n_tokens - 1;
    for (int64_t i = item.first; i <= last; i++)
      batch.add(a.rec->tokens[i], static_cast<int32_t>(i), a.seq, item.logits && i == last);
    rows.push_back({&a, item.first, item.n_tokens, item.logits, item.draft_slots, {}, batch.size() - item.n_tokens, -1});
  }
  std::vector<size_t> drafted;  // rows that carry drafts, in batch order
  bool decode_only = true;      // the governor times steps of decoding requests only
  for (const Row& r : rows) decode_only = decode_only && r.logits && r.n == 1;
  const double step_start = now_ms();
  add_drafts(rows, batch, drafted);
  metrics_.set("kestrel_batch_size", static_cast<double>(rows.size()));
  metrics_.set("kestrel_batch_tokens", static_cast<double>(batch.size()));
  const bool observe = !hidden_.empty();
  e_.model->forward(batch, *e_.kv, logits_.data(), observe ? hidden_.data() : nullptr);
  if (observe) {  // the proposer keeps the states of each request's rows (its own, then its drafts)
    const int64_t dim = e_.model->config().n_embd;
    for (const Row& r : rows) {
      // A prompt chunk's tokens are settled; a decode row's state waits for the next draft.
      proposer_->observe(r.a->seq, batch.positions[r.batch_first], batch.tokens.data() + r.batch_first,
                         hidden_.data() + r.batch_first * dim, r.n, r.n > 1);
      if (r.draft_first >= 0)
        proposer_->observe(r.a->seq, batch.positions[r.draft_first], batch.tokens.data() + r.draft_first,
                           hidden_.data() + r.draft_first * dim, static_cast<int64_t>(r.draft.size()), false);
    }
  }
  // Logits rows come in batch order: one per request row that asked, then the drafts.
  std::vector<int64_t> row_logits(rows.size(), -1), draft_logits(rows.size(), -1);
  int64_t logit_row = 0;
  for (size_t ri = 0; ri < rows.size(); ri++)
    if (rows[ri].logits) row_logits[ri] = logit_row++;
  for (const size_t ri : drafted) {  // drafts were added after every request row, in this order
    draft_logits[ri] = logit_row;
    logit_row += static_cast<int64_t>(rows[ri].draft.size());
  }
  const double done_ms = now_ms();
  int64_t step_tokens = 0;  // tokens sampled this step, for the governor
  std::vector<StepOutcome> outcomes;
  for (size_t ri = 0; ri < rows.size(); ri++) {
    int64_t computed = rows[ri].first + rows[ri].n;
    const int64_t id = rows[ri].a->id;
    if (rows[ri].logits && !verify_row(rows[ri], row_logits[ri], draft_logits[ri], done_ms, computed, step_tokens))
      continue;  // finished: its blocks are already free
    outcomes.push_back({id, computed});
  }
  for (const BlockCopies& c : sched_.update(outcomes)) e_.kv->store().copy(c);
  if (decode_only && c_.spec_draft_max > 0) governor_.record(step_tokens, (now_ms() - step_start) / 1000);
}

bool ServingEngine::verify_row(const Row& r, int64_t row_logits, int64_t draft_logits, double done_ms,
                               int64_t& computed, int64_t& sampled) {
  Active& a = *r.a;
  // The row's own pick, then each draft while the picks keep agreeing with it.
  // (Counted first: the request may end, and its client scrape /metrics, within the loop.)
  if (!r.draft.empty()) {
    metrics_.add("kestrel_spec_drafts_total");
    metrics_.add("kestrel_spec_drafted_tokens_total", static_cast<double>(r.draft.size()));
  }
  const int64_t nv = e_.model->config().n_vocab;
  float* row = logits_.data() + row_logits * nv;
  int accepted = 0;
  for (size_t i = 0;; i++) {
    const int32_t d = i < r.draft.size() ? r.draft[i] : -1;
    bool kept = false;
    const bool alive = sample(a, row, done_ms, d, &kept);  // may finish (and free) a
    sampled++;
    if (!alive) return false;
    if (!kept) break;
    accepted++;
    computed++;  // the draft's keys and values are already in the cache
    row = logits_.data() + (draft_logits + static_cast<int64_t>(i)) * nv;
  }
  if (!r.draft.empty()) a.draft_length->update(static_cast<int>(r.draft.size()), accepted);
  return true;
}

// Decoding requests with draft slots in the plan get drafts after their
// token, added to the batch after every request row.
void ServingEngine::add_drafts(std::vector<Row>& rows, Batch& batch, std::vector<size_t>& drafted) {
  std::vector<size_t> want_rows;
  for (size_t ri = 0; ri < rows.size(); ri++)
    if (rows[ri].draft_slots > 0) want_rows.push_back(ri);
  if (want_rows.empty()) return;
  std::vector<DraftRequest> reqs;
  for (size_t ri : want_rows) reqs.push_back({rows[ri].a->seq, &rows[ri].a->rec->tokens, rows[ri].draft_slots});
  std::vector<std::vector<int32_t>> drafts = proposer_->propose(reqs);  // MTP rows lie within the allocated slots
  for (size_t k = 0; k < want_rows.size(); k++) {
    Row& r = rows[want_rows[k]];
    std::vector<int32_t>& d = drafts[k];
    if (static_cast<int>(d.size()) > r.draft_slots) d.resize(static_cast<size_t>(r.draft_slots));
    if (d.empty()) continue;  // the unused slots go back at update()
    const int64_t total = r.a->rec->num_tokens();
    drafted.push_back(want_rows[k]);
    r.draft_first = batch.size();
    for (size_t i = 0; i < d.size(); i++)
      batch.add(d[i], static_cast<int32_t>(total + static_cast<int64_t>(i)), r.a->seq, true);
    r.draft = std::move(d);
  }
}

void ServingEngine::loop() {
  for (;;) {
    const double now = now_ms();
    admit_new(now);
    // Cancelled requests (client gone) and, past the shutdown deadline, everyone.
    const bool past_deadline = stop_ && now >= static_cast<double>(deadline_ms_.load());
    std::vector<int64_t> cancel;
    for (const auto& [id, a] : active_)
      if (a->channel->cancelled() || past_deadline) cancel.push_back(id);
    for (int64_t id : cancel) finish(*active_.at(id), "cancelled");
    update_gauges();
    if (active_.empty()) {
      if (stop_) return;
      std::unique_lock lock(mutex_);
      wake_.wait_for(lock, std::chrono::milliseconds(100), [&] { return !inbox_.empty() || stop_; });
      continue;
    }
    try {
      step(now);
    } catch (const std::exception& ex) {
      // A failed step fails its requests, never the server.
      std::vector<int64_t> ids;
      for (const auto& [id, a] : active_) ids.push_back(id);
      for (int64_t id : ids) finish(*active_.at(id), "error", ex.what());
    }
  }
}

}  // namespace kestrel

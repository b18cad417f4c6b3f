#include "serving/engine/serving_engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include "core/error.h"

namespace kestrel {

void RequestChannel::push(StreamEvent e) {
  std::function<void()> ready;
  {
    std::lock_guard lock(mutex_);
    if (!e.done && events_.size() >= kMaxPending) {
      overflowed_ = true;  // the end event still comes (the engine sees the cancel at its next step)
      cancelled_ = true;
      return;
    }
    events_.push_back(std::move(e));
    ready = ready_;
  }
  cv_.notify_all();
  if (ready) ready();
}

std::vector<StreamEvent> RequestChannel::pop(int timeout_ms) {
  std::unique_lock lock(mutex_);
  if (timeout_ms > 0)
    cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return !events_.empty(); });
  std::vector<StreamEvent> out(std::make_move_iterator(events_.begin()), std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

void RequestChannel::on_ready(std::function<void()> ready) {
  bool waiting = false;
  {
    std::lock_guard lock(mutex_);
    ready_ = ready;
    waiting = !events_.empty();
  }
  if (waiting && ready) ready();
}

ServingEngine::ServingEngine(LoadedModel& engine, const ServingConfig& config, ServerMetrics& metrics)
    : e_(engine), c_(config), metrics_(metrics), exec_(engine, config.exec),
      t0_(std::chrono::steady_clock::now()) {
  slots_.resize(static_cast<size_t>(std::max(0, config.n_slots)));
  metrics_.set("kestrel_kv_blocks", e_.kv->n_blocks());
  update_gauges();
  const int slots = e_.kv->blocks().n_state_slots();
  metrics_.set("kestrel_recurrent_state_slots", slots);
  metrics_.set("kestrel_recurrent_state_bytes", static_cast<double>(e_.kv->layout().state_bytes_per_seq()) * slots);
  thread_ = std::thread([this] { loop(); });
}

ServingEngine::~ServingEngine() { shutdown(0); }

double ServingEngine::now_ms() const {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
}

QueueSlot ServingEngine::enter_queue() {
  if (!accepting_) return {};
  int q = queued_.load();
  do {
    if (q >= c_.max_queue) return {};
  } while (!queued_.compare_exchange_weak(q, q + 1));
  return QueueSlot(&queued_);
}

std::shared_ptr<RequestChannel> ServingEngine::submit(ServeRequest r) {
  QueueSlot slot = enter_queue();
  if (!slot) return nullptr;
  return submit(std::move(slot), std::move(r));
}

std::shared_ptr<RequestChannel> ServingEngine::submit(QueueSlot slot, ServeRequest r) {
  // A request must fit in the pool on its own, whole, or it could never finish.
  const int64_t need = exec_.blocks_for(static_cast<int64_t>(r.params.prompt.size()) + r.params.max_tokens);
  if (need > e_.kv->n_blocks())
    throw Error(
        fmt::format("the prompt ({} tokens) plus max_tokens ({}) need {} KV blocks but the cache holds {} "
                    "(lower max_tokens or raise --kv-cache-mem)",
                    r.params.prompt.size(), r.params.max_tokens, need, e_.kv->n_blocks()));
  auto a = std::make_unique<Active>();
  a->arrival_ms = std::chrono::duration<double, std::milli>(r.arrival - t0_).count();
  a->channel = std::make_shared<RequestChannel>();
  a->slot = std::move(slot);
  auto ch = a->channel;
  {
    std::lock_guard lock(mutex_);
    inbox_.push_back({std::move(r), std::move(a)});
  }
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

void ServingEngine::between_steps(const std::function<void(LoadedModel&, std::vector<SlotRecord>&)>& fn) {
  Task t{fn, {}};
  std::future<void> done = t.done.get_future();
  {
    std::lock_guard lock(mutex_);
    if (exiting_) throw Error("the server is shutting down");
    tasks_.push_back(&t);
  }
  wake_.notify_all();
  done.get();
}

void ServingEngine::run_tasks() {
  std::vector<Task*> tasks;
  {
    std::lock_guard lock(mutex_);
    tasks.swap(tasks_);
  }
  for (Task* t : tasks) {
    try {
      t->fn(e_, slots_);
      t->done.set_value();
    } catch (...) {
      t->done.set_exception(std::current_exception());
    }
  }
}

void ServingEngine::keep_in_slot(Active& a) {
  if (slots_.empty() || a.slot_tokens.empty()) return;
  // The slot sharing the longest prefix with the prompt, else the least recently used.
  size_t best = 0;
  int64_t best_common = 0;
  for (size_t i = 0; i < slots_.size(); i++) {
    const auto& t = slots_[i].tokens;
    const auto common = static_cast<int64_t>(
        std::mismatch(t.begin(), t.end(), a.slot_tokens.begin(), a.slot_tokens.begin() + std::min<int64_t>(a.n_prompt, static_cast<int64_t>(a.slot_tokens.size()))).first - t.begin());
    if (common > best_common || (best_common == 0 && slots_[i].used < slots_[best].used)) {
      best = i;
      best_common = std::max(best_common, common);
    }
  }
  slots_[best].tokens = std::move(a.slot_tokens);
  slots_[best].used = ++slot_clock_;
}

PoolView ServingEngine::pool_view() const {
  std::lock_guard lock(mutex_);
  return pool_;
}

// The tiers' counters grow in the tiers (the disk writer's too): what they gained since the last look goes
// into the metrics' counters, their sizes into gauges.
void ServingEngine::tier_metrics() {
  if (!c_.tiers) return;
  const PrefixTiers::Stats s = c_.tiers->stats();
  auto add = [&](const char* name, const char* tier, double now, double seen) {
    if (now > seen) metrics_.add(name, now - seen, tier);
  };
  for (const char* tier : {"ram", "disk"}) {
    const bool ram = tier[0] == 'r';
    const PrefixTiers::TierStats& n = ram ? s.ram : s.disk;
    const PrefixTiers::TierStats& o = ram ? tier_seen_.ram : tier_seen_.disk;
    add("kestrel_prefix_cache_tier_hits_total", tier, static_cast<double>(n.hits), static_cast<double>(o.hits));
    add("kestrel_prefix_cache_tier_misses_total", tier, static_cast<double>(n.misses), static_cast<double>(o.misses));
    add("kestrel_prefix_cache_tier_promotions_total", tier, static_cast<double>(n.promotions),
        static_cast<double>(o.promotions));
    add("kestrel_prefix_cache_tier_evictions_total", tier, static_cast<double>(n.evictions),
        static_cast<double>(o.evictions));
    add("kestrel_prefix_cache_tier_writes_total", tier, static_cast<double>(n.writes), static_cast<double>(o.writes));
    add("kestrel_prefix_cache_tier_corrupt_total", tier, static_cast<double>(n.corrupt), static_cast<double>(o.corrupt));
    add("kestrel_prefix_cache_tier_dropped_total", tier, static_cast<double>(n.dropped), static_cast<double>(o.dropped));
    add("kestrel_prefix_cache_tier_load_seconds_total", tier, n.load_ms / 1000.0, o.load_ms / 1000.0);
  }
  metrics_.set("kestrel_prefix_cache_ram_bytes", static_cast<double>(s.ram.bytes));
  metrics_.set("kestrel_prefix_cache_ram_limit_bytes", static_cast<double>(s.ram.limit));
  metrics_.set("kestrel_prefix_cache_ram_entries", static_cast<double>(s.ram.entries));
  metrics_.set("kestrel_prefix_cache_disk_bytes", static_cast<double>(s.disk.bytes));
  metrics_.set("kestrel_prefix_cache_disk_limit_bytes", s.disk_on ? static_cast<double>(s.disk.limit) : 0.0);
  metrics_.set("kestrel_prefix_cache_disk_entries", static_cast<double>(s.disk.entries));
  tier_seen_ = s;
}

void ServingEngine::update_gauges() {
  const BlockManager& b = e_.kv->blocks();
  {
    std::lock_guard lock(mutex_);
    pool_.blocks = b.n_blocks();
    pool_.used = b.n_used_blocks();
    pool_.cached = b.n_cached_blocks();
    pool_.block_size = b.block_size();
    pool_.bytes = e_.kv->bytes();
    pool_.queried_tokens = b.prefix_stats().queried_blocks * b.block_size();
    pool_.hit_tokens = b.prefix_stats().hit_blocks * b.block_size();
    pool_.tier_hit_tokens = b.tier_hits().blocks * b.block_size();
  }
  tier_metrics();
  metrics_.set("kestrel_requests_running", exec_.n_running());
  metrics_.set("kestrel_num_requests_running", exec_.n_running());
  metrics_.set("kestrel_kv_blocks_used", b.n_used_blocks());
  metrics_.set("kestrel_kv_cache_usage_perc",
               e_.kv->n_blocks() > 0 ? static_cast<double>(b.n_used_blocks()) / static_cast<double>(e_.kv->n_blocks()) : 0.0);
  metrics_.set("kestrel_recurrent_state_slots_used", b.n_state_slots() - b.n_free_state_slots());
}

void ServingEngine::admit_new() {
  std::vector<Arrival> fresh;
  {
    std::lock_guard lock(mutex_);
    fresh.swap(inbox_);
  }
  for (auto& [req, a] : fresh) {
    const int64_t id = next_id_++;
    RequestParams& p = req.params;
    a->n_prompt = static_cast<int64_t>(p.prompt.size());
    a->pooling = req.pooling;
    a->prompt_logprobs = req.prompt_logprobs;
    a->logprobs = p.top_logprobs >= 0;
    if (!slots_.empty() && req.pooling < 0) a->slot_tokens = p.prompt;
    a->operation = std::move(req.operation);
    a->model = std::move(req.model);
    a->lora = p.lora;
    p.text = req.pooling < 0;  // the executor detokenizes the reply and ends it at a stop string
    if (req.pooling >= 0) {  // every prompt row's hidden state, computed here (no shared prefix)
      p.want_hidden = true;
      p.prefix_cache = false;
      p.max_tokens = 0;
    }
    if (req.echo) {
      a->echo_text = std::make_unique<TextStream>(*e_.tokenizer, std::vector<std::string>{}, -1);
      if (req.prompt_logprobs >= 0) {
        // Every prompt row's logits, computed here: rows a shared prefix would skip have none.
        p.all_logits = true;
        p.prefix_cache = false;
        a->echo_prompt = p.prompt;
      } else {  // the text alone, at once
        StreamEvent ev;
        ev.prompt = true;
        bool stopped = false;
        for (const int32_t t : p.prompt) ev.text += a->echo_text->push(t, stopped);
        ev.text += a->echo_text->finish(stopped);
        a->channel->push(std::move(ev));
      }
    }
    metrics_.add("kestrel_prompt_tokens_total", static_cast<double>(a->n_prompt));
    p.max_total_tokens = e_.n_ctx;
    if (req.grammar) {
      p.constraint = a->constraint = std::make_shared<TokenConstraint>(req.grammar, e_.grammar_vocab(), p.shown_control);
      metrics_.add("kestrel_grammar_requests_total", 1);
    }
    // The one record of the request from here on (the prompt moves into it).
    auto rec = std::make_unique<Request>();
    rec->id = id;
    rec->seq = static_cast<int32_t>(id & 0x7fffffff);
    rec->arrival_ms = a->arrival_ms;
    rec->params = std::move(p);
    rec->attachment = std::move(a);  // the client side goes with the record from here on
    exec_.add(std::move(rec));
  }
}

void ServingEngine::finish(Active& a, const std::string& reason, const std::string& error, int64_t cached_tokens,
                           const RequestOutput* out) {
  StreamEvent end;
  if (out) {  // the text the executor held back until the end, and the stop string that ended it
    end.text = out->end_text;
    end.stop_string = out->stop_string;
  }
  end.done = true;
  end.finish_reason = reason;
  end.error = error;
  if (a.constraint) {
    metrics_.add("kestrel_grammar_masks_total", static_cast<double>(a.constraint->stats().masks));
    metrics_.add("kestrel_grammar_mask_seconds_total", a.constraint->stats().mask_seconds);
  }
  end.prompt_tokens = a.n_prompt;
  end.completion_tokens = a.completion_tokens;
  end.cached_tokens = cached_tokens;
  const double now = now_ms();
  end.queue_ms = a.first_step_ms >= 0 ? a.first_step_ms - a.arrival_ms : now - a.arrival_ms;
  end.ttft_ms = a.first_token_ms >= 0 ? a.first_token_ms - a.arrival_ms : -1;
  end.e2e_ms = now - a.arrival_ms;
  end.prefill_steps_ms = std::move(a.prefill_steps_ms);
  if (reason != "error") keep_in_slot(a);
  // Counted before the client can see the end: a /metrics scrape right after
  // a response must include it.
  metrics_.add("kestrel_requests_total", 1, reason);
  if (a.lora)
    for (const auto& [adapter, scale] : a.lora->adapters) {
      metrics_.add("kestrel_lora_requests_total", 1, adapter->label());
      metrics_.add("kestrel_lora_request_seconds_total", (now - a.arrival_ms) / 1000, adapter->label());
      metrics_.add("kestrel_lora_generation_tokens_total", static_cast<double>(a.completion_tokens), adapter->label());
    }
  if (reason != "error" && reason != "cancelled")
    metrics_.observe("kestrel_e2e_request_latency_seconds", (now_ms() - a.arrival_ms) / 1000);
  GenAiRequest g;
  g.operation = a.operation;
  g.request_model = a.model;
  // error.type: a low-cardinality class of the failure (the conventions' fallback, _OTHER, for an engine
  // error; a client gone or a shutdown past its deadline is "cancelled").
  if (reason == "error") g.error_type = "_OTHER";
  if (reason == "cancelled") g.error_type = "cancelled";
  g.duration_s = end.e2e_ms / 1000;
  g.ttft_s = end.ttft_ms >= 0 ? end.ttft_ms / 1000 : -1;
  g.output_tokens = a.completion_tokens;
  metrics_.observe_gen_ai(g);
  a.slot.release();
  a.channel->push(std::move(end));
  // The client side owes nothing more: what it holds of the client goes now, not when the executor lets the
  // record's attachment go (at its next step, or with the engine, after the HTTP server a channel's
  // ready-callback reaches into).
  a.channel.reset();
}

void ServingEngine::note_token_time(Active& a) {
  const double now = now_ms();
  if (a.first_token_ms < 0) {
    a.first_token_ms = now;
    metrics_.observe("kestrel_time_to_first_token_seconds", (now - a.arrival_ms) / 1000);
  }
  if (a.last_token_ms >= 0) metrics_.observe("kestrel_inter_token_latency_seconds", (now - a.last_token_ms) / 1000);
  a.last_token_ms = now;
}

// What a step did to one request: its first step leaves the queue, each new
// token goes to the client as an event (its text, the token, its logprobs),
// and its end (the executor's decision: EOS, a stop string, a limit) ends the stream.
void ServingEngine::deliver(const RequestOutput& out) {
  // The record's client side, or (the request ended) the one its end handed back.
  Active* client = out.finished ? static_cast<Active*>(out.attachment.get()) : client_of(exec_.record(out.id));
  if (!client) return;
  Active& a = *client;
  if (out.started) {
    a.first_step_ms = now_ms();
    metrics_.observe("kestrel_request_queue_time_seconds", (a.first_step_ms - a.arrival_ms) / 1000);
    a.slot.release();
  }
  if (a.first_token_ms < 0 && a.prefill_steps_ms.size() < StreamEvent::kMaxPrefillSteps)
    a.prefill_steps_ms.push_back(now_ms() - a.arrival_ms);  // a step before its first token: prompt rows
  if (!a.echo_prompt.empty()) echo_prompt(a, out);
  if (a.pooling >= 0) pool_rows(a, out);
  if (out.drafted > 0) {
    metrics_.add("kestrel_spec_drafts_total");
    metrics_.add("kestrel_spec_drafted_tokens_total", static_cast<double>(out.drafted));
  }
  for (const TokenOutput& t : out.tokens) {
    if (t.accepted) metrics_.add("kestrel_spec_accepted_tokens_total");  // before any event of this token goes out
    if (!t.end_token) {  // (the end of generation is counted below, as for every request)
      if (!a.slot_tokens.empty()) a.slot_tokens.push_back(t.token);
      note_token_time(a);
      metrics_.add("kestrel_generation_tokens_total");
      a.completion_tokens++;
    }
    StreamEvent ev;
    ev.text = t.text;
    ev.has_token = true;
    ev.token.token = t.token;
    ev.token.text = e_.tokenizer->token_to_piece(t.token, t.end_token);  // the end token by its name ("</s>")
    if (a.logprobs) {
      ev.token.logprob = t.logprob;
      for (const TokenChoice& c : t.top) ev.top.push_back({c.token, e_.tokenizer->token_to_piece(c.token), c.logprob});
    }
    a.channel->push(std::move(ev));
  }
  if (!out.finished) return;
  if (out.finish == FinishReason::Eos) note_token_time(a);  // the end of generation is a token too
  finish(a, openai_finish_reason(out.finish), "", out.cached_tokens, &out);
}

void ServingEngine::echo_prompt(Active& a, const RequestOutput& out) {
  const auto n_prompt = static_cast<int64_t>(a.echo_prompt.size());
  const int64_t nv = e_.model->config().n_vocab;
  auto send = [&](int64_t pos, const float* row) {
    const int32_t tok = a.echo_prompt[static_cast<size_t>(pos)];
    StreamEvent ev;
    ev.prompt = true;
    ev.has_token = true;
    bool stopped = false;
    ev.text = a.echo_text->push(tok, stopped);
    if (pos + 1 == n_prompt) ev.text += a.echo_text->finish(stopped);
    ev.token = {tok, e_.tokenizer->token_to_piece(tok, true), 0.0f};
    if (row) {
      prompt_logprobs_.observe(row, nv, a.prompt_logprobs);
      ev.token.logprob = prompt_logprobs_.logprob(tok);
      for (const TokenChoice& c : prompt_logprobs_.top())
        ev.top.push_back({c.token, e_.tokenizer->token_to_piece(c.token, true), c.logprob});
    } else {
      ev.null_logprob = true;
    }
    a.channel->push(std::move(ev));
    a.echo_next = pos + 1;
  };
  if (a.echo_next == 0) send(0, nullptr);
  if (out.logits_first < 0) return;
  // Row i holds the logits after position logits_first + i: the next prompt token's distribution. A recomputed
  // prefix (after a preemption) brings rows already sent; rows past the prompt are the generation's.
  const auto rows = static_cast<int64_t>(out.logits.size()) / nv;
  for (int64_t i = 0; i < rows && a.echo_next < n_prompt; i++)
    if (out.logits_first + i + 1 == a.echo_next) send(a.echo_next, out.logits.data() + i * nv);
  if (a.echo_next == n_prompt) a.echo_prompt = {};  // all sent
}

void ServingEngine::pool_rows(Active& a, const RequestOutput& out) {
  const int64_t dim = e_.model->hidden_dim();
  if (a.pooled.empty()) a.pooled.assign(static_cast<size_t>(dim), 0.0);
  const auto rows = static_cast<int64_t>(out.hidden.size()) / dim;
  for (int64_t i = 0; i < rows && a.pool_next < a.n_prompt; i++) {
    const int64_t pos = out.hidden_first + i;
    if (pos != a.pool_next) continue;  // (rows a preemption's recompute brings again)
    const float* h = out.hidden.data() + i * dim;
    const bool last = pos == a.n_prompt - 1;
    const bool take = a.pooling == 1 || (a.pooling == 2 && pos == 0) || ((a.pooling == 3 || a.pooling == 4) && last);
    if (take)
      for (int64_t d = 0; d < dim; d++) a.pooled[static_cast<size_t>(d)] += h[d];
    a.pool_next++;
  }
  if (!out.finished || a.pool_next < a.n_prompt) return;
  StreamEvent ev;
  ev.embedding.resize(static_cast<size_t>(dim));
  const double scale = a.pooling == 1 ? 1.0 / static_cast<double>(a.n_prompt) : 1.0;
  for (int64_t d = 0; d < dim; d++) ev.embedding[static_cast<size_t>(d)] = static_cast<float>(a.pooled[static_cast<size_t>(d)] * scale);
  if (a.pooling == 4) ev.embedding = e_.model->classify(ev.embedding.data());  // a reranker: its scores
  a.channel->push(std::move(ev));
}

void ServingEngine::step(double now) {
  const StepReport r = exec_.step(now);
  for (const RequestOutput& out : r) deliver(out);
  if (r.preempted > 0) metrics_.add("kestrel_preemptions_total", static_cast<double>(r.preempted));
  if (r.pipelined > 0) metrics_.add("kestrel_pipelined_steps_total", static_cast<double>(r.pipelined));
  // In tokens, as vLLM counts them: a hit rate is then comparable across block sizes.
  const auto block_tokens = static_cast<double>(e_.kv->block_size());
  metrics_.add("kestrel_prefix_cache_queries_total", static_cast<double>(r.queried_prefix_blocks) * block_tokens);
  metrics_.add("kestrel_prefix_cache_hits_total", static_cast<double>(r.hit_prefix_blocks) * block_tokens);
  if (r.ran) {
    metrics_.set("kestrel_batch_size", static_cast<double>(r.rows));
    metrics_.set("kestrel_batch_tokens", static_cast<double>(r.batch_tokens));
  } else if (r.wait_ms > 0) {
    std::unique_lock lock(mutex_);
    wake_.wait_for(lock, std::chrono::duration<double, std::milli>(r.wait_ms), [&] { return !inbox_.empty() || stop_; });
  }
}

void ServingEngine::loop() {
  // Ends the requests `which` picks, as `reason` (with `error`): each end event, then the record.
  auto end_requests = [&](auto which, const std::string& reason, const std::string& error) {
    std::vector<const Request*> ending;
    for (const auto& rec : exec_.records())
      if (const Active* a = client_of(rec.get()); a && which(*a)) ending.push_back(rec.get());
    for (const Request* rec : ending) {
      const int64_t id = rec->id;
      finish(*client_of(rec), reason, error, rec->num_cached_tokens);
      exec_.remove(id);
    }
  };
  auto every = [](const Active&) { return true; };
  for (;;) {
    const double now = now_ms();
    run_tasks();
    admit_new();
    // Cancelled requests (client gone) and, past the shutdown deadline, everyone.
    const bool past_deadline = stop_ && now >= static_cast<double>(deadline_ms_.load());
    end_requests([&](const Active& a) { return a.channel->cancelled() || past_deadline; }, "cancelled", "");
    update_gauges();
    if (exec_.records().empty()) {
      if (stop_) {  // tasks that came too late are told so (none can come after: exiting_ is set with them)
        std::lock_guard lock(mutex_);
        for (Task* t : tasks_) t->done.set_exception(std::make_exception_ptr(Error("the server is shutting down")));
        tasks_.clear();
        exiting_ = true;
        return;
      }
      std::unique_lock lock(mutex_);
      wake_.wait_for(lock, std::chrono::milliseconds(100), [&] { return !inbox_.empty() || stop_ || !tasks_.empty(); });
      continue;
    }
    if (!fatal_.empty()) {  // nothing can run: every request ends with the reason
      end_requests(every, "error", fatal_);
      continue;
    }
    try {
      step(now);
    } catch (const CommunicatorFailure& ex) {
      // The ranks of a tensor-parallel job can no longer meet.
      accepting_ = false;
      fatal_ = fmt::format("the model's ranks stopped answering: {}", ex.what());
      if (c_.on_fatal) c_.on_fatal(fatal_);
    } catch (const std::exception& ex) {
      // A failed step fails its requests, never the server.
      end_requests(every, "error", ex.what());
    }
  }
}

}  // namespace kestrel

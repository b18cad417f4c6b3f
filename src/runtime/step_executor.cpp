#include "runtime/step_executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/error.h"
#include "model/batch_io.h"

namespace kestrel {

namespace {
double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

StepExecutor::StepExecutor(LoadedModel& engine, const ExecConfig& config)
    : e_(engine), c_(config), proposer_(config.spec_draft_max > 0 ? config.proposer : nullptr),
      sched_(config.scheduler, engine.kv->blocks()) {
  if (config.scheduler.max_batch_tokens > e_.model->max_batch_tokens())
    throw Error(fmt::format("the batch token budget {} exceeds the model's planned batch of {}",
                            config.scheduler.max_batch_tokens, e_.model->max_batch_tokens()));
  if (config.spec_draft_max < 0 || config.spec_draft_max > 64)
    throw Error(fmt::format("draft length {} is out of range (0 to 64)", config.spec_draft_max));
  if (config.spec_draft_max > 0 && !config.proposer)
    throw Error("speculative decoding needs a proposer");
  // One logits row per request (every prompt row with all_logits), plus one per drafted token.
  const int64_t rows = c_.all_logits ? c_.scheduler.max_batch_tokens
                                     : std::min<int64_t>(c_.scheduler.max_batch_tokens,
                                                         int64_t{c_.scheduler.max_batch_size} * (1 + c_.spec_draft_max));
  base_logits_ = static_cast<size_t>(rows * e_.model->config().n_vocab);
  logits_.resize(base_logits_);
  if (proposer_ && proposer_->wants_hidden())
    hidden_.resize(static_cast<size_t>(e_.model->max_batch_tokens() * e_.model->hidden_dim()));
  depth_ = proposer_ ? 1 : std::max(1, e_.model->steps_in_flight());
  for (int i = 0; i < depth_; i++) flights_.emplace_back(e_.model->max_batch_tokens());
}

const Request& StepExecutor::add(std::unique_ptr<Request> r) {
  if (r->params.prompt.empty()) throw Error("a request needs at least one prompt token");
  if (sched_.find(r->id)) throw Error(fmt::format("request {} is already running", r->id));
  RequestParams& p = r->params;
  check_media(p);
  if (p.max_total_tokens <= 0) p.max_total_tokens = e_.n_ctx;
  r->sampler = std::make_unique<Sampler>(p.sampling, e_.model->config().n_vocab);
  r->reasoning_phase = p.reasoning_opened ? 1 : 0;  // (a prompt that opened the reasoning starts inside it)
  if (p.text) r->text = std::make_unique<TextStream>(*e_.tokenizer, p.stop, p.prompt.back(), p.shown_control);
  if (proposer_)
    r->draft_length = std::make_unique<DraftLength>(
        static_cast<int>(std::min<int64_t>(c_.spec_draft_max, c_.scheduler.max_batch_tokens - 1)));
  // Room for every token it may reach, so that appending never reallocates.
  p.prompt.reserve(static_cast<size_t>(
      std::min<int64_t>(static_cast<int64_t>(p.prompt.size()) + p.max_tokens, p.max_total_tokens)));
  return sched_.add(std::move(r));
}

// Media spans: inside the prompt, in order, rows of the model's input width, and (attended both ways) no longer
// than a step can take at once; not with speculation (a draft model would be fed the placeholders).
void StepExecutor::check_media(const RequestParams& p) const {
  int64_t end = 0;
  const auto n_prompt = static_cast<int64_t>(p.prompt.size());
  const int64_t step = std::min(c_.scheduler.prefill_chunk, c_.scheduler.max_batch_tokens);
  for (const MediaSpan& m : p.media) {
    if (m.start < end || m.n_tokens <= 0 || m.end() > n_prompt)
      throw Error(fmt::format("a media span [{}, {}) is not inside the prompt of {} tokens after the previous one",
                              m.start, m.end(), n_prompt));
    if (m.width != e_.model->config().n_embd || !m.rows ||
        static_cast<int64_t>(m.rows->size()) != m.n_tokens * m.width)
      throw Error(fmt::format("a media span's rows are {} wide; the model takes rows of {}", m.width,
                              e_.model->config().n_embd));
    if (m.both_ways && m.n_tokens > step)
      throw Error(fmt::format("an image of {} tokens is attended as a whole, but a step takes at most {} tokens: "
                              "raise -b/--batch-size (serve: --prefill-chunk and --batch-size) to at least {}",
                              m.n_tokens, step, m.n_tokens));
    if (m.grid_w > 0) {
      const int* sec = e_.model->config().rope_sections;
      if (sec[0] + sec[1] + sec[2] + sec[3] == 0)
        throw Error(fmt::format("an image laid out for M-RoPE positions, but {} models turn by one position",
                                e_.model->config().arch));
      if (m.grid_w * m.grid_h != m.n_tokens)
        throw Error(fmt::format("a media grid of {}x{} for {} rows", m.grid_w, m.grid_h, m.n_tokens));
    }
    end = m.end();
  }
  if (!p.media.empty() && proposer_) throw Error("media in a prompt cannot be combined with speculative decoding yet");
}

std::string StepExecutor::remove(int64_t id) {
  Request* r = sched_.find(id);
  if (!r) return {};
  std::string held;
  if (r->text) {
    bool stopped = false;
    held = r->text->finish(stopped);
  }
  if (proposer_ && !c_.keep_proposer_state) proposer_->forget(r->seq);
  sched_.remove(id);  // its blocks and record too
  return held;
}

RequestOutput& StepExecutor::output(int64_t id) {
  for (size_t i = 0; i < n_outputs_; i++)
    if (outputs_[i].id == id) return outputs_[i];
  if (n_outputs_ == outputs_.size()) outputs_.emplace_back();
  RequestOutput& o = outputs_[n_outputs_++];
  o.id = id;
  o.started = o.finished = false;
  o.drafted = 0;
  o.tokens.clear();
  o.logits.clear();
  o.logits_first = -1;
  o.hidden.clear();
  o.hidden_first = -1;
  o.prompt_tokens = o.completion_tokens = o.cached_tokens = 0;
  o.end_text.clear();
  o.stop_string.clear();
  o.attachment.reset();
  return o;
}

void StepExecutor::keep_logits(RequestOutput& out, const float* row, int64_t position) {
  if (out.logits.empty()) out.logits_first = position;
  out.logits.insert(out.logits.end(), row, row + e_.model->config().n_vocab);
}

void StepExecutor::end(Request& r, RequestOutput& out, FinishReason reason) {
  out.finished = true;
  out.finish = reason;
  if (r.text) {
    if (reason != FinishReason::Stop) {  // what was held back as a possible stop string's start is final now
      bool stopped = false;
      out.end_text = r.text->finish(stopped);
      if (stopped) out.finish = FinishReason::Stop;
    }
    out.stop_string = r.text->matched_stop();
  }
  out.prompt_tokens = r.n_prompt;
  out.completion_tokens = r.generated();
  out.cached_tokens = r.num_cached_tokens;
  out.attachment = std::move(r.attachment);
  remove(r.id);
}

// Before planning: how many drafts each decoding request could use after its
// token — the rest of max_tokens and of the context, as the draft length allows.
void StepExecutor::set_draft_wants() {
  const bool drafting = proposer_ && (!c_.spec_governed || governor_.drafting());
  for (const auto& r : sched_.requests()) {
    r->draft_want = 0;
    if (!drafting || !r->decoding()) continue;
    const int64_t room = std::min({static_cast<int64_t>(r->draft_length->next()), r->params.max_tokens - r->generated() - 1,
                                   e_.n_ctx - r->num_tokens()});
    r->draft_want = static_cast<int>(std::max<int64_t>(0, room));
  }
}

void StepExecutor::build_batch(const StepPlan& plan, Flight& f) {
  Batch& batch = f.batch;
  std::vector<Row>& rows = f.rows;
  batch.clear();
  rows.clear();
  both_ways_.clear();
  rope_rows_.clear();
  for (const auto& item : plan.items) {
    Request& r = *sched_.find(item.id);
    RequestOutput& o = output(item.id);  // every request the step runs has an output (a prefill chunk too)
    if (!r.scheduled) {
      r.scheduled = true;
      o.started = true;
    }
    const int64_t last = item.first + item.n_tokens - 1;
    const int64_t row0 = batch.size();
    for (int64_t i = item.first; i <= last; i++)
      batch.add(std::max(r.tokens[i], 0), static_cast<int32_t>(i), r.seq,  // (media placeholders: token 0)
                (item.logits && i == last) || (r.params.all_logits && i < r.num_tokens()));
    for (const MediaSpan& m : r.params.media) add_media_rows(batch, m, item.first, last + 1, row0);
    if (has_media_grid(r.params.media)) rope_rows_.push_back({row0, item.n_tokens, item.first, &r.params.media});
    rows.push_back({&r,
                    item.id,
                    item.first,
                    item.n_tokens,
                    item.logits,
                    r.params.all_logits,
                    item.draft_slots,
                    {},
                    batch.size() - item.n_tokens,
                    -1});
    rows.back().want_hidden = r.params.want_hidden;
  }
}

// The rows of media span m among a request's rows [first, end) (batch rows from row0): their input rows, and
// for a span attended both ways its batch rows (set_horizons gives them the span's last position).
void StepExecutor::add_media_rows(Batch& batch, const MediaSpan& m, int64_t first, int64_t end, int64_t row0) {
  const int64_t a = std::max(first, m.start), b = std::min(end, m.end());
  if (a >= b) return;
  for (int64_t i = a; i < b; i++) batch.embd_rows.push_back(row0 + i - first);
  const float* src = m.rows->data() + (a - m.start) * m.width;
  batch.embd.insert(batch.embd.end(), src, src + (b - a) * m.width);
  if (m.both_ways) both_ways_.push_back({row0 + a - first, b - a, static_cast<int32_t>(m.end() - 1)});
}

// Every row's LoRA adapter set once the batch is complete (drafts included), where a request runs adapters.
void StepExecutor::set_lora_rows(Flight& f) {
  Batch& batch = f.batch;
  bool any = false;
  for (const Row& row : f.rows) any = any || (row.r && row.r->params.lora);
  if (!any) return;
  batch.lora_rows.assign(static_cast<size_t>(batch.size()), -1);
  for (const Row& row : f.rows) {
    if (!row.r || !row.r->params.lora) continue;
    const LoraSet* set = row.r->params.lora.get();
    auto it = std::find(batch.lora_sets.begin(), batch.lora_sets.end(), set);
    const auto k = static_cast<int32_t>(it - batch.lora_sets.begin());
    if (it == batch.lora_sets.end()) batch.lora_sets.push_back(set);
    std::fill_n(batch.lora_rows.begin() + row.batch_first, row.n, k);
    if (!row.draft.empty()) std::fill_n(batch.lora_rows.begin() + row.draft_first, row.draft.size(), k);
  }
}

// Every row's horizon once the batch is complete (drafts included), where a span is attended both ways.
void StepExecutor::set_horizons(Batch& batch) {
  if (both_ways_.empty()) return;
  batch.horizons.assign(batch.positions.begin(), batch.positions.end());
  for (const auto& [row, n, last] : both_ways_) std::fill_n(batch.horizons.begin() + row, n, last);
}

// The M-RoPE positions of every row once the batch is complete, where a request's media have grids: its rows
// by media_rope_position, every other row its position thrice.
void StepExecutor::set_rope_positions(Batch& batch) {
  if (rope_rows_.empty()) return;
  const int64_t n = batch.size();
  batch.rope_pos.resize(static_cast<size_t>(3 * n));
  for (int s = 0; s < 3; s++) std::copy(batch.positions.begin(), batch.positions.end(), batch.rope_pos.begin() + s * n);
  for (const RopeRows& rr : rope_rows_)
    for (int64_t i = 0; i < rr.n; i++) {
      int32_t p[3];
      media_rope_position(*rr.media, rr.first + i, p);
      for (int s = 0; s < 3; s++) batch.rope_pos[static_cast<size_t>(s * n + rr.row + i)] = p[s];
    }
}

// Decoding requests with draft slots in the plan get drafts after their
// token, added to the batch after every request row.
void StepExecutor::add_drafts(Flight& f) {
  Batch& batch = f.batch;
  std::vector<Row>& rows = f.rows;
  std::vector<size_t> want_rows;
  std::vector<DraftRequest> reqs;
  for (size_t ri = 0; ri < rows.size(); ri++) {
    if (rows[ri].draft_slots <= 0) continue;
    want_rows.push_back(ri);
    reqs.push_back({rows[ri].r->seq, &rows[ri].r->tokens, rows[ri].draft_slots});
  }
  if (reqs.empty()) return;
  std::vector<std::vector<int32_t>> drafts = proposer_->propose(reqs);  // MTP rows lie within the allocated slots
  for (size_t k = 0; k < want_rows.size(); k++) {
    Row& row = rows[want_rows[k]];
    std::vector<int32_t>& d = drafts[k];
    if (static_cast<int>(d.size()) > row.draft_slots) d.resize(static_cast<size_t>(row.draft_slots));
    if (d.empty()) continue;  // the unused slots go back at update()
    const int64_t total = row.r->num_tokens();
    row.draft_first = batch.size();
    for (size_t i = 0; i < d.size(); i++)
      batch.add(d[i], static_cast<int32_t>(total + static_cast<int64_t>(i)), row.r->seq, true);
    row.draft = std::move(d);
  }
}

// The proposer keeps the states of each request's rows (its own, then its drafts).
void StepExecutor::observe_hidden(const Flight& f) {
  const Batch& batch = f.batch;
  const int64_t dim = e_.model->hidden_dim();
  for (const Row& r : f.rows) {
    if (!r.r) continue;
    // A prompt chunk's tokens are settled; a decode row's state waits for the next draft.
    proposer_->observe(r.r->seq, batch.positions[r.batch_first], batch.tokens.data() + r.batch_first,
                       hidden_.data() + r.batch_first * dim, r.n, r.n > 1);
    if (r.draft_first >= 0)
      proposer_->observe(r.r->seq, batch.positions[r.draft_first], batch.tokens.data() + r.draft_first,
                         hidden_.data() + r.draft_first * dim, static_cast<int64_t>(r.draft.size()), false);
  }
}

// Logits rows come in batch order: the request rows' (all prompt rows of an
// all_logits request, else its last), then the drafts'.
void StepExecutor::assign_logits_rows(Flight& f) {
  int64_t next = 0;
  for (Row& r : f.rows) {
    const int64_t n_rows = r.all_logits ? r.n : (r.logits ? 1 : 0);
    r.first_logits_row = next;
    next += n_rows;
    if (r.logits) r.logits_row = next - 1;
    r.draft_logits_row = -1;
  }
  for (Row& r : f.rows) {
    if (r.draft.empty()) continue;
    r.draft_logits_row = next;
    next += static_cast<int64_t>(r.draft.size());
  }
}

StepReport StepExecutor::step(double now_ms) {
  StepReport report;
  for (size_t i = 0; i < n_outputs_; i++) outputs_[i].attachment.reset();  // the last step's ends, handed back
  n_outputs_ = 0;
  report.outputs = &outputs_;
  // Start steps while a slot is free, each over an even share of the
  // requests not in flight (with one slot: all of them, as the budget allows).
  while (static_cast<int>(in_flight_.size()) < depth_ && sched_.n_plannable() > 0) {
    int slot = 0;
    while (std::find(in_flight_.begin(), in_flight_.end(), slot) != in_flight_.end()) slot++;
    if (!launch(now_ms, slot, report)) break;
  }
  if (!in_flight_.empty()) land(report);
  report.n_outputs = n_outputs_;
  return report;
}

bool StepExecutor::launch(double now_ms, int slot, StepReport& report) {
  set_draft_wants();
  // An even share of the requests not in flight per free slot, and no more
  // requests in flight together than a step may hold (--max-batch-size).
  const int free_slots = depth_ - static_cast<int>(in_flight_.size()), plannable = sched_.n_plannable();
  int held = 0;
  for (int s : in_flight_) held += static_cast<int>(flights_[static_cast<size_t>(s)].rows.size());
  const int share = (plannable + free_slots - 1) / free_slots;
  const StepPlan& plan = sched_.plan(now_ms, std::min(share, c_.scheduler.max_batch_size - held));
  report.preempted += static_cast<int>(plan.preempted.size());
  report.queried_prefix_blocks += plan.queried_prefix_blocks;
  report.hit_prefix_blocks += plan.hit_prefix_blocks;
  if (plan.items.empty()) {
    if (in_flight_.empty()) report.wait_ms = plan.wait_ms;
    return false;
  }
  Flight& f = flights_[static_cast<size_t>(slot)];
  e_.kv->move_tier_rows(false);  // rows of blocks the plan reuses out to RAM, prefix hits' rows in from the tiers
  for (const BlockCopies& c : plan.state_copies) e_.kv->store().copy(c);  // prefix hits' recurrent state
  build_batch(plan, f);
  f.decode_only = true;
  for (const Row& r : f.rows) f.decode_only = f.decode_only && r.logits && r.n == 1;
  f.start_s = seconds_now();
  add_drafts(f);
  set_lora_rows(f);
  set_horizons(f.batch);
  set_rope_positions(f.batch);
  f.batch.best = best_needed(f);
  if (f.batch.best > 0) {  // the rows' best candidates come back in buffers of their own (grown, then reused)
    const auto n = static_cast<size_t>(f.batch.n_logit_rows() * f.batch.best);
    if (f.best_ids.size() < n) f.best_ids.resize(n), f.best_vals.resize(n);
    f.batch.best_ids = f.best_ids.data();
    f.batch.best_vals = f.best_vals.data();
  }
  place_batch(f.batch, *e_.kv, e_.model->config().n_vocab, f.place);
  if (depth_ > 1) {  // (one slot: forward() at landing)
    e_.model->start_forward(f.batch, f.place, e_.kv->store(), slot);
    for (const Row& r : f.rows) r.r->in_flight = true;
    if (!in_flight_.empty()) report.pipelined++;
  }
  in_flight_.push_back(slot);
  return true;
}

void StepExecutor::land(StepReport& report) {
  const int slot = in_flight_.front();
  in_flight_.erase(in_flight_.begin());
  Flight& f = flights_[static_cast<size_t>(slot)];
  report.ran = true;
  report.rows = static_cast<int>(f.rows.size());
  report.batch_tokens = f.batch.size();
  // A step with more logits rows than the buffer holds (a request asking for every prompt row's logits, in a
  // server sized for one row per request) grows it; a much larger buffer than usual goes back after.
  const int64_t need = f.batch.n_logit_rows() * e_.model->config().n_vocab;
  if (static_cast<int64_t>(logits_.size()) < need) {
    logits_.resize(static_cast<size_t>(need));
  } else if (logits_.size() > 4 * base_logits_ && static_cast<int64_t>(base_logits_) >= need) {
    logits_.resize(base_logits_);
    logits_.shrink_to_fit();
  }
  // Rows whose hidden states a request wants (embeddings) get the buffer the proposer may have made already.
  const bool proposer_hidden = proposer_ && proposer_->wants_hidden();
  bool keep_hidden = false;
  for (const Row& r : f.rows) keep_hidden = keep_hidden || r.want_hidden;
  if (keep_hidden && hidden_.empty())
    hidden_.resize(static_cast<size_t>(e_.model->max_batch_tokens() * e_.model->hidden_dim()));
  try {
    if (depth_ == 1) {
      e_.model->forward(f.batch, f.place, e_.kv->store(), logits_.data(),
                        proposer_hidden || keep_hidden ? hidden_.data() : nullptr);
    } else {
      if (keep_hidden) throw Error("hidden states (embeddings) are not kept across pipelined steps (pp > 1)");
      e_.model->finish_forward(slot, logits_.data());
    }
  } catch (...) {
    e_.backend->abandon();  // what a device queued for the failed step never runs with a later one
    throw;
  }
  for (Row& row : f.rows) {  // requests cancelled while their step was in flight are gone
    row.r = sched_.find(row.id);
    if (row.r) row.r->in_flight = false;
  }
  if (proposer_hidden) observe_hidden(f);
  assign_logits_rows(f);

  const int64_t nv = e_.model->config().n_vocab;
  int64_t sampled = 0;  // tokens sampled this step, for the governor
  std::vector<StepOutcome>& outcomes = outcomes_;
  outcomes.clear();
  for (Row& row : f.rows) {
    if (!row.r) continue;
    if (row.want_hidden) {
      RequestOutput& out = output(row.id);
      const int64_t dim = e_.model->hidden_dim();
      if (out.hidden.empty()) out.hidden_first = row.first;
      const float* h = hidden_.data() + row.batch_first * dim;
      out.hidden.insert(out.hidden.end(), h, h + row.n * dim);
    }
    if (row.all_logits) {  // its prompt rows, but the one it samples from
      RequestOutput& out = output(row.id);
      const int64_t n_prompt_rows = row.logits ? row.n - 1 : row.n;
      for (int64_t i = 0; i < n_prompt_rows; i++) keep_logits(out, logits_.data() + (row.first_logits_row + i) * nv, row.first + i);
    }
    int64_t computed = row.first + row.n;
    if (row.logits && !sample_row(row, computed, sampled, f.batch))
      continue;  // ended: its blocks are free already
    outcomes.push_back({row.id, rollback_state(row, computed)});
  }
  const std::vector<BlockCopies>& copies = sched_.update(outcomes);
  e_.kv->move_tier_rows(false);
  for (const BlockCopies& c : copies) e_.kv->store().copy(c);
  e_.kv->move_tier_rows(true);
  if (f.decode_only && proposer_) governor_.record(sampled, seconds_now() - f.start_s);
}

// A recurrent state (linear-attention layers) cannot drop rejected drafts: it goes back to the checkpoint the
// model took at the step's first position (a step feeding more than one row takes one), and the request feeds
// its accepted tokens again in its next step — the attention layers' KV of them is rewritten the same.
int64_t StepExecutor::rollback_state(const Row& row, int64_t computed) {
  KvStore& store = e_.kv->store();
  const int64_t fed = row.first + row.n + static_cast<int64_t>(row.draft.size());
  if (store.n_state_slots() == 0 || computed >= fed) return computed;
  const int32_t slot = e_.kv->blocks().state_slot(row.r->seq);
  if (slot < 0 || store.mark(slot).checkpoint != row.first)
    throw Error(fmt::format("sequence {}: no recurrent-state checkpoint at position {} to roll rejected drafts back to",
                            row.r->seq, row.first));
  store.restore_state(slot);
  return row.first;
}

// How many of each logits row's best candidates the step's sampling needs, when that is all it needs
// (Batch::best: a GPU then downloads those, not rows): the model can, and every row that samples does so
// from its best candidates alone (Sampler::best_needed: greedy, or top-k with no penalties or biases), with
// nothing else reading its logits (logprobs, a grammar, drafts, all_logits). 1: every row greedy (the argmax);
// 0: whole rows.
int32_t StepExecutor::best_needed(const Flight& f) const {
  if (!e_.model->best_on_device() || proposer_ || depth_ > 1) return 0;
  int best = 0;
  bool sampled = false;
  for (const Row& row : f.rows) {
    if (!row.logits && !row.all_logits) continue;
    const Request& r = *row.r;
    const int need = r.sampler->best_needed();
    if (row.all_logits || !row.draft.empty() || need < 1 || need > kMaxBest || r.params.top_logprobs >= 0 ||
        r.params.constraint)
      return 0;
    best = std::max(best, need);
    sampled = sampled || !r.sampler->plain_greedy();
  }
  return sampled ? std::max(best, 2) : best;  // (a sampled row reads the logits too: best > 1)
}

bool StepExecutor::sample_row(Row& row, int64_t& computed, int64_t& sampled, const Batch& batch) {
  const int32_t best = batch.best;
  Request& r = *row.r;
  RequestOutput& out = output(r.id);
  const int64_t nv = e_.model->config().n_vocab;
  float* logits = logits_.data() + row.logits_row * nv;
  const int64_t row_pos = row.first + row.n - 1;  // the position the sampled row's logits follow
  if (r.params.max_tokens == 0) {  // prefill only
    if (r.params.all_logits) keep_logits(out, logits, row_pos);
    end(r, out, FinishReason::Length);
    return false;
  }
  out.drafted += static_cast<int>(row.draft.size());
  // The row's own pick, then each draft while the picks keep agreeing with it.
  int accepted = 0;
  TokenConstraint* grammar = r.params.constraint.get();
  for (size_t i = 0;; i++) {
    if (r.params.all_logits) keep_logits(out, logits, row_pos + static_cast<int64_t>(i));
    if (r.params.top_logprobs >= 0) logprobs_.observe(logits, nv, r.params.top_logprobs);  // before the sampler rewrites it
    // The grammar first: a draft it does not allow gets probability 0 and is rejected.
    if (grammar && (grammar->finished() || grammar->mask(logits, nv) == 0)) {
      end(r, out, FinishReason::Eos);  // matched completely (or nothing can follow)
      return false;
    }
    const int32_t d = i < row.draft.size() ? row.draft[i] : -1;
    bool kept = false;
    int32_t tok = 0;
    if (best > 0) {  // Batch::best: the row's best ids (and, best > 1, their logits) instead of the row
      const int32_t* ids = batch.best_ids + row.logits_row * best;
      tok = best == 1 ? ids[0] : r.sampler->sample_best(ids, batch.best_vals + row.logits_row * best, best);
    } else {
      tok = d >= 0 ? r.sampler->sample_or_accept(logits, r.tokens, d, kept) : r.sampler->sample(logits, r.tokens);
    }
    sampled++;
    if (r.params.reasoning_budget >= 0) tok = reasoning_budget(r, tok, d, kept);
    if (grammar) grammar->accept(tok);
    if (!take(r, out, tok, kept)) return false;
    if (!kept) break;
    accepted++;
    computed++;  // the draft's keys and values are already in the cache
    logits = logits_.data() + (row.draft_logits_row + static_cast<int64_t>(i)) * nv;
  }
  if (!row.draft.empty()) r.draft_length->update(static_cast<int>(row.draft.size()), accepted);
  return true;
}

namespace {
// Whether the tokens so far, then tok, end with tag.
bool ends_with(const std::vector<int32_t>& tokens, int32_t tok, const std::vector<int32_t>& tag) {
  if (tag.empty() || tag.back() != tok || tokens.size() + 1 < tag.size()) return false;
  return std::equal(tag.begin(), tag.end() - 1, tokens.end() - static_cast<std::ptrdiff_t>(tag.size() - 1));
}
}  // namespace

int32_t StepExecutor::reasoning_budget(Request& r, int32_t tok, int32_t draft, bool& kept) {
  const RequestParams& p = r.params;
  if (r.reasoning_phase == 1 && (r.closing > 0 || r.reasoning_tokens >= p.reasoning_budget)) {
    tok = p.reasoning_close[r.closing++];  // the budget is spent: the reasoning is closed
    kept = draft >= 0 && tok == draft;
  }
  if (r.reasoning_phase == 0 && ends_with(r.tokens, tok, p.reasoning_open)) {
    r.reasoning_phase = 1;
  } else if (r.reasoning_phase == 1) {
    r.reasoning_tokens++;
    if (ends_with(r.tokens, tok, p.reasoning_close)) r.reasoning_phase = 2;
  }
  return tok;
}

TokenOutput& StepExecutor::emit(const Request& r, RequestOutput& out, int32_t tok, bool accepted) {
  TokenOutput& t = out.tokens.emplace_back();
  t.token = tok;
  t.accepted = accepted;
  t.top.clear();
  if (r.params.top_logprobs >= 0) {
    t.logprob = logprobs_.logprob(tok);
    t.top = logprobs_.top();
  }
  t.text.clear();
  return t;
}

bool StepExecutor::take(Request& r, RequestOutput& out, int32_t tok, bool accepted) {
  if (!r.params.ignore_eos && e_.tokenizer->vocab().is_end_of_generation(tok)) {
    if (r.params.logprob_end_token && r.params.top_logprobs >= 0) emit(r, out, tok, accepted).end_token = true;
    end(r, out, FinishReason::Eos);
    return false;
  }
  r.tokens.push_back(tok);  // the record: one more token to feed
  TokenOutput& t = emit(r, out, tok, accepted);
  if (r.text) {
    bool stopped = false;
    t.text = r.text->push(tok, stopped);
    if (stopped) {  // the text completed a stop string: it ends before it, and nothing more is generated
      end(r, out, FinishReason::Stop);
      return false;
    }
  }
  if (r.generated() >= r.params.max_tokens) {
    end(r, out, FinishReason::Length);
    return false;
  }
  if (r.num_tokens() >= r.params.max_total_tokens) {
    end(r, out, FinishReason::Context);
    return false;
  }
  return true;
}

}  // namespace kestrel

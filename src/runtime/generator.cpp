#include "runtime/generator.h"

#include <fmt/format.h>

#include <chrono>

#include "core/error.h"
#include "runtime/step_executor.h"
#include "runtime/text_stream.h"

namespace kestrel {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

GenerationResult generate(LoadedModel& e, const std::vector<int32_t>& prompt, const GenerationParams& params,
                          const GenerationCallbacks& cb) {
  Model& model = *e.model;
  const int64_t n_vocab = model.config().n_vocab;
  if (prompt.empty()) throw Error("the prompt is empty: give a prompt or token ids (the model needs at least one token)");
  if (static_cast<int64_t>(prompt.size()) > e.n_ctx)
    throw Error(fmt::format("the prompt has {} tokens but the context holds {} (raise -c/--ctx-size or shorten the prompt)",
                            prompt.size(), e.n_ctx));
  if (params.max_tokens < 0) throw Error(fmt::format("max tokens {} must not be negative", params.max_tokens));
  for (int32_t t : prompt)
    if (t < 0 || t >= n_vocab) throw Error(fmt::format("prompt token id {} is outside the vocabulary (0..{})", t, n_vocab - 1));
  params.sampling.validate();

  // One request, sequence 0, through the step executor `serve` uses too:
  // prefill in chunks of the model's batch, then one token (and its drafts)
  // per step.
  e.kv->erase(0);
  ExecConfig xc;
  xc.scheduler.max_batch_tokens = model.max_batch_tokens();
  xc.scheduler.prefill_chunk = model.max_batch_tokens();
  xc.scheduler.max_batch_size = 1;
  xc.spec_draft_max = params.spec_draft_max;
  xc.proposer = params.proposer;
  xc.spec_governed = params.spec_governed;
  xc.all_logits = params.all_logits;
  xc.keep_proposer_state = true;  // the next generation reuses what a draft model cached
  StepExecutor exec(e, xc);
  ExecRequest req;
  req.prompt = prompt;
  req.sampling = params.sampling;
  req.max_tokens = params.max_tokens;
  req.max_total_tokens = e.n_ctx + 1;  // the last token generated needs no KV
  req.ignore_eos = params.ignore_eos;
  req.all_logits = params.all_logits;
  req.prefix_cache = false;  // every prompt position is computed (its logits may be asked for)
  if (params.grammar)
    req.constraint = std::make_shared<TokenConstraint>(params.grammar, e.grammar_vocab());
  exec.add(req);

  struct Hooks : StepHooks {
    const GenerationCallbacks& cb;
    int64_t n_vocab;
    GenerationResult& r;
    TextStream text;
    Clock::time_point t0 = Clock::now(), t1{};
    bool prefilled = false, done = false, cancel = false;
    Hooks(const GenerationCallbacks& c, int64_t nv, GenerationResult& res, TextStream t)
        : cb(c), n_vocab(nv), r(res), text(std::move(t)) {}
    void emit(const std::string& s) {
      if (s.empty()) return;
      r.text += s;
      if (cb.on_text) cb.on_text(s);
    }
    void on_prompt_logits(int64_t, const float* row) override {
      if (cb.on_logits) cb.on_logits(row, n_vocab);
    }
    void on_row(int64_t, const float* row) override {
      if (!prefilled) {
        prefilled = true;
        r.prefill_seconds = seconds_since(t0);
        t1 = Clock::now();
      }
      if (cb.on_logits) cb.on_logits(row, n_vocab);
    }
    void on_drafts(int64_t, int n) override {
      r.spec_steps++;
      r.spec_drafted += n;
    }
    bool on_token(int64_t, int32_t tok, bool accepted) override {
      r.tokens.push_back(tok);
      r.spec_accepted += accepted;
      bool stopped = false;
      emit(text.push(tok, stopped));
      if (!stopped && cb.cancelled && cb.cancelled()) cancel = true;
      return !stopped && !cancel;
    }
    void on_end(int64_t, EndReason reason) override {
      done = true;
      r.stop_reason = reason == EndReason::Eos ? "eos" : reason == EndReason::Stop ? "stop"
                    : reason == EndReason::Context ? "context" : "length";
      if (reason != EndReason::Stop || cancel) {
        bool stopped = false;
        emit(text.finish(stopped));
        if (stopped) r.stop_reason = "stop";
      }
      if (cancel) r.stop_reason = "cancelled";
      r.decode_seconds = seconds_since(t1);
    }
  };
  GenerationResult r;
  r.n_prompt = static_cast<int64_t>(prompt.size());
  Hooks hooks(cb, n_vocab, r, TextStream(*e.tokenizer, params.stop, prompt.back()));
  while (!hooks.done) {
    const StepReport step = exec.step(0, hooks);
    if (!step.ran && !hooks.done)
      throw Error("the KV cache cannot hold the prompt (raise -c/--ctx-size or --kv-cache-mem)");
  }
  if (req.constraint) r.grammar = req.constraint->stats();
  return r;
}

}  // namespace kestrel

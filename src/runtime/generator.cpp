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
  size_t span = 0;
  for (size_t i = 0; i < prompt.size(); i++) {
    while (span < params.media.size() && params.media[span].end() <= static_cast<int64_t>(i)) span++;
    if (span < params.media.size() && params.media[span].start <= static_cast<int64_t>(i)) continue;  // a placeholder
    const int32_t t = prompt[i];
    if (t < 0 || t >= n_vocab) throw Error(fmt::format("prompt token id {} is outside the vocabulary (0..{})", t, n_vocab - 1));
  }
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
  auto req = std::make_unique<Request>();
  req->params.prompt = prompt;
  req->params.media = params.media;
  req->params.lora = params.lora;
  req->params.sampling = params.sampling;
  req->params.max_tokens = params.max_tokens;
  req->params.max_total_tokens = e.n_ctx + 1;  // the last token generated needs no KV
  req->params.ignore_eos = params.ignore_eos;
  req->params.all_logits = params.all_logits;
  req->params.prefix_cache = params.prefix_cache && !params.all_logits;  // else every position is computed
  req->params.text = true;  // the executor detokenizes the reply and ends it at a stop string
  req->params.stop = params.stop;
  if (params.grammar)
    req->params.constraint = std::make_shared<TokenConstraint>(params.grammar, e.grammar_vocab());
  const std::shared_ptr<TokenConstraint> grammar = req->params.constraint;
  exec.add(std::move(req));

  GenerationResult r;
  r.n_prompt = static_cast<int64_t>(prompt.size());
  auto emit = [&](const std::string& s) {
    if (s.empty()) return;
    r.text += s;
    if (cb.on_text) cb.on_text(s);
  };
  const Clock::time_point t0 = Clock::now();
  Clock::time_point t1{};
  bool prefilled = false;
  for (bool done = false; !done;) {
    const StepReport step = exec.step(0);
    if (!step.ran) throw Error("the KV cache cannot hold the prompt (raise -c/--ctx-size or --kv-cache-mem)");
    for (const RequestOutput& out : step) {
      if (cb.on_logits)
        for (size_t i = 0; i < out.logits.size(); i += static_cast<size_t>(n_vocab)) cb.on_logits(out.logits.data() + i, n_vocab);
      // The first row sampled from ends the prefill.
      if (!prefilled && (!out.tokens.empty() || out.finished)) {
        prefilled = true;
        r.prefill_seconds = seconds_since(t0);
        t1 = Clock::now();
      }
      if (out.drafted > 0) {
        r.spec_steps++;
        r.spec_drafted += out.drafted;
      }
      bool cancel = false;
      for (const TokenOutput& t : out.tokens) {
        r.tokens.push_back(t.token);
        r.spec_accepted += t.accepted;
        emit(t.text);
        if (!out.finished && cb.cancelled && cb.cancelled()) {
          cancel = true;
          break;
        }
      }
      if (!cancel && !out.finished) continue;
      done = true;
      if (cancel) {  // the front ends it: the text held back so far is shown
        emit(exec.remove(out.id));
        r.stop_reason = "cancelled";
      } else {  // the executor ended it: EOS, a stop string, a limit
        emit(out.end_text);
        r.stop_reason = finish_reason_name(out.finish);
      }
      r.decode_seconds = seconds_since(t1);
    }
  }
  if (grammar) r.grammar = grammar->stats();
  return r;
}

}  // namespace kestrel

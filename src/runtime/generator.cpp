#include "runtime/generator.h"

#include <fmt/format.h>

#include <chrono>

#include "core/error.h"
#include "model/batch_io.h"
#include "runtime/draft_length.h"
#include "runtime/spec_governor.h"
#include "runtime/text_stream.h"

namespace kestrel {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Speculation's governor: probes of 8 steps with and without drafts, then
// 128 steps in the faster mode (spec_governor.h).
constexpr int kGovernorWindow = 8, kGovernorPeriod = 128;

}  // namespace

GenerationResult generate(Engine& e, const std::vector<int32_t>& prompt, const GenerationParams& params,
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
  if (params.spec_draft_max < 0 || params.spec_draft_max > 64)
    throw Error(fmt::format("draft length {} is out of range (0 to 64)", params.spec_draft_max));
  if (params.spec_draft_max > 0 && !params.proposer)
    throw Error("speculative decoding needs a proposer (GenerationParams::proposer)");

  constexpr int32_t seq = 0;
  e.kv->remove(seq);
  Sampler sampler(params.sampling, n_vocab);
  GenerationResult r;
  r.n_prompt = static_cast<int64_t>(prompt.size());
  std::vector<int32_t> history = prompt;
  const int64_t chunk = model.max_batch_tokens();
  const int64_t spec_rows = std::min<int64_t>(params.spec_draft_max, chunk - 1) + 1;
  std::vector<float> logits(static_cast<size_t>(std::max<int64_t>(params.all_logits ? chunk : 1, spec_rows) * n_vocab));
  Proposer* const proposer = params.spec_draft_max > 0 ? params.proposer : nullptr;
  const bool observe = proposer && proposer->wants_hidden();
  std::vector<float> hidden(observe ? static_cast<size_t>(chunk * model.config().n_embd) : 0);
  // A forward step, handing its hidden states to the proposer when it wants them.
  auto forward = [&](const Batch& b, bool prompt) {
    allocate_kv(b, *e.kv);
    model.forward(b, *e.kv, logits.data(), observe ? hidden.data() : nullptr);
    if (observe) proposer->observe(seq, b.positions[0], b.tokens.data(), hidden.data(), b.size(), prompt);
  };

  // Prefill in chunks; only the last prompt token needs logits unless asked.
  const auto t0 = Clock::now();
  Batch batch;
  for (int64_t start = 0; start < r.n_prompt; start += chunk) {
    const int64_t end = std::min(r.n_prompt, start + chunk);
    batch.clear();
    for (int64_t i = start; i < end; i++)
      batch.add(prompt[i], static_cast<int32_t>(i), seq, params.all_logits || i == r.n_prompt - 1);
    forward(batch, true);
    if (cb.on_logits && params.all_logits)
      for (int64_t i = 0; i < end - start; i++) cb.on_logits(logits.data() + i * n_vocab, n_vocab);
  }
  r.prefill_seconds = seconds_since(t0);
  float* last = logits.data() + (params.all_logits ? ((r.n_prompt - 1) % chunk) * n_vocab : 0);
  if (cb.on_logits && !params.all_logits) cb.on_logits(last, n_vocab);
  if (last != logits.data()) std::copy(last, last + n_vocab, logits.data());

  TextStream text(*e.tokenizer, params.stop, prompt.back());
  auto emit = [&](const std::string& s) {
    if (s.empty()) return;
    r.text += s;
    if (cb.on_text) cb.on_text(s);
  };
  const Vocab& vocab = e.tokenizer->vocab();
  const auto t1 = Clock::now();
  r.stop_reason = "length";
  // Takes one generated token; false when generation ends with it (or before it).
  auto take = [&](int32_t tok) {
    if (!params.ignore_eos && vocab.is_end_of_generation(tok)) {
      r.stop_reason = "eos";
      return false;
    }
    r.tokens.push_back(tok);
    history.push_back(tok);
    bool stopped = false;
    emit(text.push(tok, stopped));
    if (stopped) {
      r.stop_reason = "stop";
      return false;
    }
    if (static_cast<int64_t>(r.tokens.size()) == params.max_tokens) return false;
    if (static_cast<int64_t>(history.size()) - 1 >= e.n_ctx) {
      r.stop_reason = "context";
      return false;
    }
    return true;
  };
  if (params.max_tokens > 0 && params.spec_draft_max == 0) {
    while (take(sampler.sample(logits.data(), history))) {
      batch.clear();
      batch.add(history.back(), static_cast<int32_t>(history.size() - 1), seq, true);
      allocate_kv(batch, *e.kv);
      model.forward(batch, *e.kv, logits.data());
      if (cb.on_logits) cb.on_logits(logits.data(), n_vocab);
    }
  } else if (params.max_tokens > 0) {
    // The last taken token is not in the cache yet; it goes in with the
    // draft, every row gets logits, and the drafted tokens are kept while
    // they equal what the model picks from the row before them. The first
    // pick that differs (or the one after a fully accepted draft) is the
    // next token; the cache drops the rejected drafts.
    DraftLength length(static_cast<int>(spec_rows - 1));
    SpecGovernor governor(kGovernorWindow, kGovernorPeriod);
    bool going = take(sampler.sample(logits.data(), history));
    while (going) {
      const auto step_start = Clock::now();
      const auto taken_before = static_cast<int64_t>(r.tokens.size());
      const auto pos = static_cast<int64_t>(history.size()) - 1;
      // Drafts must fit the context, and leave the step's own pick within max_tokens.
      const int64_t room =
          std::min(e.n_ctx - 1 - pos, params.max_tokens - static_cast<int64_t>(r.tokens.size()) - 1);
      const int want =
          !params.spec_governed || governor.drafting() ? static_cast<int>(std::min<int64_t>(length.next(), std::max<int64_t>(room, 0))) : 0;
      std::vector<int32_t> draft = want > 0 ? proposer->propose({{seq, &history, want}})[0] : std::vector<int32_t>{};
      if (static_cast<int>(draft.size()) > want) draft.resize(static_cast<size_t>(want));
      batch.clear();
      batch.add(history.back(), static_cast<int32_t>(pos), seq, true);
      for (size_t i = 0; i < draft.size(); i++) batch.add(draft[i], static_cast<int32_t>(pos + 1 + i), seq, true);
      forward(batch, false);
      int accepted = 0;
      for (size_t i = 0; i <= draft.size() && going; i++) {
        float* row = logits.data() + i * n_vocab;  // the sampler works in place
        if (cb.on_logits) cb.on_logits(row, n_vocab);
        bool match = false;
        const int32_t tok = i < draft.size() ? sampler.sample_or_accept(row, history, draft[i], match)
                                             : sampler.sample(row, history);
        if (!match && i < draft.size()) e.kv->truncate(seq, pos + 1 + static_cast<int64_t>(i));
        if (match) accepted++;
        going = take(tok);
        if (!match) break;
      }
      if (!draft.empty()) {
        r.spec_steps++;
        r.spec_drafted += static_cast<int64_t>(draft.size());
        r.spec_accepted += accepted;
        length.update(static_cast<int>(draft.size()), accepted);
      }
      governor.record(static_cast<int64_t>(r.tokens.size()) - taken_before, seconds_since(step_start));
    }
  }
  if (r.stop_reason != "stop") {
    bool stopped = false;
    emit(text.finish(stopped));
    if (stopped) r.stop_reason = "stop";
  }
  r.decode_seconds = seconds_since(t1);
  return r;
}

}  // namespace kestrel

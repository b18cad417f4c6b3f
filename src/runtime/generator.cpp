#include "runtime/generator.h"

#include <fmt/format.h>

#include <chrono>

#include "core/error.h"
#include "runtime/text_stream.h"

namespace kestrel {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

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

  constexpr int32_t seq = 0;
  e.kv->remove(seq);
  Sampler sampler(params.sampling, n_vocab);
  GenerationResult r;
  r.n_prompt = static_cast<int64_t>(prompt.size());
  std::vector<int32_t> history = prompt;
  const int64_t chunk = model.max_batch_tokens();
  std::vector<float> logits(static_cast<size_t>((params.all_logits ? chunk : 1) * n_vocab));

  // Prefill in chunks; only the last prompt token needs logits unless asked.
  const auto t0 = Clock::now();
  Batch batch;
  for (int64_t start = 0; start < r.n_prompt; start += chunk) {
    const int64_t end = std::min(r.n_prompt, start + chunk);
    batch.clear();
    for (int64_t i = start; i < end; i++)
      batch.add(prompt[i], static_cast<int32_t>(i), seq, params.all_logits || i == r.n_prompt - 1);
    model.forward(batch, *e.kv, logits.data());
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
  for (int64_t step = 0; step < params.max_tokens; step++) {
    const int32_t tok = sampler.sample(logits.data(), history);
    if (!params.ignore_eos && vocab.is_end_of_generation(tok)) {
      r.stop_reason = "eos";
      break;
    }
    r.tokens.push_back(tok);
    history.push_back(tok);
    bool stopped = false;
    emit(text.push(tok, stopped));
    if (stopped) {
      r.stop_reason = "stop";
      break;
    }
    if (step + 1 == params.max_tokens) break;
    const int64_t pos = static_cast<int64_t>(history.size()) - 1;
    if (pos >= e.n_ctx) {
      r.stop_reason = "context";
      break;
    }
    batch.clear();
    batch.add(tok, static_cast<int32_t>(pos), seq, true);
    model.forward(batch, *e.kv, logits.data());
    if (cb.on_logits) cb.on_logits(logits.data(), n_vocab);
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

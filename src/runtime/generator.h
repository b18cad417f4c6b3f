#pragma once
// One sequence from prompt to stop: prefill in batches, then decode token by
// token through the same batched forward, sampling and streaming text.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "grammar/token_constraint.h"
#include "runtime/loaded_model.h"
#include "runtime/proposer.h"
#include "runtime/request.h"
#include "runtime/sampler.h"

namespace kestrel {

struct GenerationParams {
  int64_t max_tokens = 128;
  SamplingParams sampling;
  std::vector<std::string> stop;   // stop strings: generation ends before them
  bool ignore_eos = false;
  bool all_logits = false;         // compute logits for every prompt position too
  // Start from (and publish) the cache's blocks of an equal prefix, as serve's requests do (off: every
  // prompt position is computed). bench's decode at depth reuses its prompt this way.
  bool prefix_cache = false;
  // Speculative decoding: up to this many drafted tokens, from `proposer`,
  // verified per forward step (0: off). Greedy: the same tokens as without;
  // sampling: the same distribution (the draws differ).
  int spec_draft_max = 0;
  // Stop drafting while it measures slower than plain decoding
  // (spec_governor.h); off: draft whenever the adaptive draft length allows.
  bool spec_governed = false;
  // Where drafts come from (spec/spec_source.h builds the one behind --spec);
  // required with spec_draft_max > 0. It drafts for sequence 0.
  Proposer* proposer = nullptr;
  // Structured output: only text this grammar matches is generated; the
  // generation ends when it has matched completely.
  std::shared_ptr<const Grammar> grammar;
  // Media in the prompt (mmproj/media_prompt.h): its spans' placeholders are the only negative ids allowed.
  std::vector<MediaSpan> media;
  // LoRA adapters the generation runs with (null: none; LoadedModel::default_lora()).
  std::shared_ptr<const LoraSet> lora;
};

struct GenerationResult {
  std::vector<int32_t> tokens;     // generated ids
  std::string text;                // generated text (stop string excluded)
  std::string stop_reason;         // "length", "eos", "stop", "context", "cancelled"
  int64_t n_prompt = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  // Speculation: verification steps that carried a draft, drafted and accepted tokens.
  int64_t spec_steps = 0, spec_drafted = 0, spec_accepted = 0;
  GrammarStats grammar;  // with a grammar: the masks' count and time
};

struct GenerationCallbacks {
  // Text as it becomes final (complete UTF-8, never part of a stop string).
  std::function<void(const std::string&)> on_text;
  // Each logits row computed, in position order (prompt rows only with all_logits).
  std::function<void(const float*, int64_t n_vocab)> on_logits;
  // Asked after each token: true stops the generation there (stop_reason "cancelled").
  std::function<bool()> cancelled;
};

// Runs on sequence 0 of the engine's KV cache (cleared first). Throws Error
// when the prompt is empty or does not fit in the context.
GenerationResult generate(LoadedModel& engine, const std::vector<int32_t>& prompt, const GenerationParams& params,
                          const GenerationCallbacks& callbacks = {});

}  // namespace kestrel

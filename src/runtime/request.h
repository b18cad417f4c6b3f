#pragma once
// One request's record, from submission to its end: what the client asked
// (RequestParams), its progress — the tokens so far and how many of them
// the KV cache holds, which the scheduler plans from — and its sampling
// state. The scheduler owns the records; the executor and the fronts (`serve`,
// `run`) refer to them by id and read what each step did from its outputs
// (step_executor.h), never from copies.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "grammar/token_constraint.h"
#include "model/lora.h"
#include "runtime/draft_length.h"
#include "runtime/sampler.h"
#include "runtime/text_stream.h"

namespace kestrel {

// Media in a prompt (an image's rows from an mmproj encoder, mmproj/mmproj.h): prompt tokens [start, start +
// n_tokens) are placeholders fed these input rows (n_tokens * width floats) instead of token embeddings. The
// placeholders are negative ids derived from the media's content hash (media_placeholders), so the prefix cache,
// which names blocks by their tokens, shares a prefix only where the same media sits at the same place. both_ways:
// the span's rows attend to each other in both directions (Gemma 3), so a prefill chunk never ends inside it.
struct MediaSpan {
  int64_t start = 0, n_tokens = 0, width = 0;
  std::shared_ptr<const std::vector<float>> rows;
  bool both_ways = false;
  // > 0: the rows are a grid_w x grid_h image in raster order whose rows take M-RoPE positions (Qwen3.5's images;
  // model/batch.h's rope_pos), and the positions after it advance by max(grid_w, grid_h).
  int64_t grid_w = 0, grid_h = 0;
  int64_t end() const { return start + n_tokens; }
};
// The rotary positions (temporal, height, width) of a sequence's position i among its media spans (ascending):
// inside a span with a grid (t, t + row, t + column) with t its first row's, else i less what the grids before
// it saved, thrice (llama.cpp's mtmd M-RoPE positions).
void media_rope_position(const std::vector<MediaSpan>& media, int64_t i, int32_t out[3]);
bool has_media_grid(const std::vector<MediaSpan>& media);
// n placeholder ids for media whose content hashes to `hash`: negative, never a vocabulary id.
std::vector<int32_t> media_placeholders(uint64_t hash, int64_t n);

struct RequestParams {
  std::vector<int32_t> prompt;  // at least one token (moved into the record's tokens at submission)
  std::vector<MediaSpan> media;  // ascending, not overlapping, inside the prompt
  int priority = 0;             // lower runs earlier (as vLLM)
  SamplingParams sampling;
  int64_t max_tokens = 16;        // generated tokens at most (0: prefill only)
  int64_t max_total_tokens = 0;   // the request ends when prompt + generated reach this (0: the context)
  bool ignore_eos = false;
  bool all_logits = false;    // every position's raw logits go to the step's outputs (perplexity-style callers)
  bool prefix_cache = true;   // may start from (and publish) named blocks of an equal prefix
  // Anthropic's cache_control breakpoints: each {tokens, seconds} keeps the prompt's first `tokens` in the
  // prefix cache's RAM tier for `seconds` once computed (ascending by tokens).
  std::vector<std::pair<int64_t, double>> cache_pins;
  int top_logprobs = -1;      // -1: no logprobs; n >= 0: each token's logprob and the top n alternatives
  bool logprob_end_token = false;  // with top_logprobs: the end-of-generation token goes out too (end_token set)
  bool want_hidden = false;   // every row's final hidden state goes to the step's outputs (embeddings)
  // A reasoning budget (Anthropic's thinking.budget_tokens): once this many tokens were generated inside the
  // reasoning — after reasoning_open's tokens, or from the start with reasoning_opened (the prompt opened
  // it) — reasoning_close's tokens are generated in place of what would be sampled. -1: no budget.
  int64_t reasoning_budget = -1;
  std::vector<int32_t> reasoning_open, reasoning_close;
  bool reasoning_opened = false;
  // Structured output: tokens the grammar does not allow are masked before
  // every sampling, drafts included; the request ends when the grammar can take nothing more.
  std::shared_ptr<TokenConstraint> constraint;
  // The reply as text (runtime/text_stream.h), for a front that sends text: the executor detokenizes each
  // generated token (TokenOutput::text, never splitting a UTF-8 character) and ends the request at the first
  // stop string the text completes (FinishReason::Stop; the text ends before it). shown_control: control
  // tokens written into the text as their spelling (tool-call markers a reply parser reads).
  bool text = false;
  std::vector<std::string> stop;
  std::vector<int32_t> shown_control;
  // The LoRA adapters the request runs with (null: none; model/lora.h): its rows take their updates, and its
  // prefix-cache blocks are named under the set's key.
  std::shared_ptr<const LoraSet> lora;
};

// Why a request ended.
enum class FinishReason { Eos, Stop, Length, Context };
// "eos", "stop", "length", "context" (what `run` reports).
const char* finish_reason_name(FinishReason r);
// OpenAI's finish_reason: "stop" for Eos and Stop, "length" for Length and Context.
const char* openai_finish_reason(FinishReason r);

// What the caller keeps with a request (the server: what it owes the request's client — serving_engine.h's
// Active), carried by the record so a request has one record: the caller reads it through the record while the
// request runs and gets it back in the output that ends it (RequestOutput::attachment).
struct RequestAttachment {
  virtual ~RequestAttachment() = default;
};

struct Request {
  int64_t id = 0;
  int32_t seq = 0;  // its sequence in the KV ledger
  double arrival_ms = 0;
  RequestParams params;

  // Progress: the scheduler plans from these, the executor moves them on.
  std::vector<int32_t> tokens;      // prompt + generated so far
  int64_t n_prompt = 0;             // the first n_prompt of them are the prompt
  int64_t num_computed_tokens = 0;  // of those, tokens whose KV is in the cache
  int64_t num_cached_tokens = 0;    // prompt tokens the prefix cache served at first admission
  int draft_want = 0;               // drafted tokens the proposer could add after the next decode token
  bool running = false;             // admitted (holds KV); false: waiting
  // In a step that has started and not finished (pipelining across steps):
  // not planned again, not preempted, until the executor clears it.
  bool in_flight = false;
  bool admitted_once = false;
  size_t cache_pins_done = 0;  // of params.cache_pins
  bool scheduled = false;  // its first step has been planned (it left the queue)

  // Where the reply is against params.reasoning_budget: 0 before the reasoning, 1 inside, 2 after it.
  int reasoning_phase = 0;
  int64_t reasoning_tokens = 0;  // generated inside the reasoning so far
  size_t closing = 0;            // close-tag tokens forced so far (the budget ran out)

  // Sampling state (set by the executor).
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<TextStream> text;  // params.text: the reply's text so far
  std::unique_ptr<DraftLength> draft_length;  // with speculation

  std::shared_ptr<RequestAttachment> attachment;  // the caller's, or null

  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  int64_t generated() const { return num_tokens() - n_prompt; }
  bool decoding() const { return running && num_tokens() - num_computed_tokens == 1; }
  int priority() const { return params.priority; }
  bool prefix_cache() const { return params.prefix_cache; }
  uint64_t lora_key() const { return params.lora ? params.lora->key : 0; }
};

}  // namespace kestrel

#pragma once
// What a completion asks, whichever API it came in by. Each front reads its
// own body into a CompletionAsk — OpenAI's parser, Anthropic's, Ollama's, the
// Responses API's, /infill's — checking and naming its own fields (Fields
// reads optional ones with the request's own names); prepare_completion then
// renders a chat through the template, tokenizes, fits the prompt and the
// generation in the context and builds what is submitted. No front writes
// another API's JSON for a parser to read back.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/sampler.h"
#include "serving/api/openai_api.h"

namespace kestrel {

// Stop strings a request may give: OpenAI takes 4; evaluation harnesses send more (every task's `until` plus the
// end-of-text string).
constexpr size_t kMaxStops = 16;

struct CompletionAsk {
  bool chat = false;
  std::string model;  // the name the request used, echoed in the answer
  // Chat: the chat template's inputs, in the shape chat templates read (OpenAI's chat messages): messages, and
  // where given tools, tool_choice, parallel_tool_calls, chat_template_kwargs, reasoning_effort. Checked by
  // render_chat_request.
  nlohmann::ordered_json chat_input = nlohmann::ordered_json::object();
  // Completions: the prompts, tokenized (a list: one request per prompt and choice).
  std::vector<std::vector<int32_t>> prompts;
  // Completions: instead, one prompt with media (llama-server's {"prompt_string", "multimodal_data"}): its text, the
  // files going where it has the media marker (llama.cpp's `<__media__>`, or the server's own that GET /props
  // tells), tokenized by prepare_completion as llama-server's libmtmd does (special tokens parsed, BOS where the
  // vocabulary adds one).
  std::optional<std::string> media_text;
  std::vector<MediaPart> media;
  std::optional<int64_t> max_tokens;  // none: to the end of the context (chat, until_context), 16 (completions)
  bool until_context = false;         // a completion without max_tokens runs to the end of the context
  // Sampling with the neutral defaults (temperature 1, no top-k/top-p/min-p, no penalties); seed: none draws one.
  SamplingParams sampling = neutral_sampling();
  std::optional<uint64_t> seed;
  int n = 1;  // choices per prompt
  std::vector<std::string> stop;
  int priority = 0;
  bool ignore_eos = false;
  // llama-server's per-request `lora` ([{id, scale}]; serving/api/lora_api.h), when given.
  std::optional<std::vector<std::pair<int, float>>> lora;
  // Structured output: response_format or grammar, as requested_grammar reads them (an empty object: none).
  nlohmann::ordered_json structured = nlohmann::ordered_json::object();
  std::optional<int64_t> reasoning_budget;  // chat: at most this many tokens of reasoning
  int top_logprobs = -1;                    // -1: no logprobs; else the alternatives per token
  bool echo = false;                        // completions: the prompt sent back first (with its logprobs)
  // Completions: a reply ended by the end-of-generation token lists that token last in its logprobs (no text, not
  // counted in usage), as vLLM does: a harness scoring a prompt with echo and max_tokens 1 drops the last entry
  // as the generated token, and without it would drop the prompt's last token instead.
  bool logprob_end_token = false;
  bool stream = false;
  bool include_usage_chunk = false;    // OpenAI's stream_options.include_usage
  bool token_ids_in_logprobs = false;  // return_tokens_as_token_ids
  // Anthropic's cache_control breakpoints: the prefix of chat_input's first `messages` messages (the whole
  // conversation when it is all of them) kept in the prefix cache for ttl_s.
  struct CacheBreakpoint {
    size_t messages = 0;
    double ttl_s = 300;
  };
  std::vector<CacheBreakpoint> cache_breakpoints;
  // The request's own names for what prepare_completion may refuse.
  struct Names {
    std::string prompt;  // "" : "messages" for a chat, "prompt" else
    std::string max_tokens = "max_tokens";
    std::string reasoning_budget = "reasoning_budget";
  } names;

  static SamplingParams neutral_sampling();
};

// Throws ApiError naming the request's own field.
ParsedRequest prepare_completion(const ApiContext& ctx, CompletionAsk ask);

// The sampling fields OpenAI's API, llama-server's and Ollama's options share, where present (each with OpenAI's
// range; the ask's values are the defaults): temperature, top_p, top_k (-1: none), min_p, presence_penalty,
// frequency_penalty, the repeat penalty under its key (OpenAI/vLLM's repetition_penalty, llama.cpp's
// repeat_penalty), repeat_last_n (-1: the context), seed.
class Fields;
void read_sampling(const Fields& f, const ApiContext& ctx, const char* repeat_penalty_key, CompletionAsk& ask);

// OpenAI's reader: a /v1/completions (chat: /v1/chat/completions) body as an ask; every field checked, an
// unknown or unimplemented one a 400 naming it.
CompletionAsk openai_ask(const ApiContext& ctx, const nlohmann::ordered_json& body, bool chat);

// Optional fields of an object (absent or null: the default), each named `where + key` in the 400 it is refused
// with ("options.temperature").
class Fields {
 public:
  Fields(const nlohmann::ordered_json& o, std::string where = "") : o_(o), where_(std::move(where)) {}
  bool has(const char* key) const { return o_.contains(key) && !o_[key].is_null(); }
  std::string name(const char* key) const { return where_ + key; }
  std::optional<double> number(const char* key, double lo, double hi) const;
  double number(const char* key, double lo, double hi, double dflt) const { return number(key, lo, hi).value_or(dflt); }
  std::optional<int64_t> integer(const char* key, int64_t lo, int64_t hi) const;
  int64_t integer(const char* key, int64_t lo, int64_t hi, int64_t dflt) const {
    return integer(key, lo, hi).value_or(dflt);
  }
  std::optional<bool> boolean(const char* key) const;
  bool boolean(const char* key, bool dflt) const { return boolean(key).value_or(dflt); }
  // A string or an array of at most `max` non-empty strings.
  std::vector<std::string> strings(const char* key, size_t max) const;

 private:
  const nlohmann::ordered_json& o_;
  std::string where_;
};

}  // namespace kestrel

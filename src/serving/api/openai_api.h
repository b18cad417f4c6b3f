#pragma once
// The OpenAI-compatible request side: JSON bodies of /v1/completions and
// /v1/chat/completions checked field by field into a ServeRequest. Every
// problem is an ApiError naming the field, turned into a 4xx response with
// an OpenAI-style error body.
#include <cstdint>
#include <exception>
#include <nlohmann/json.hpp>
#include <set>
#include <functional>
#include <string>

#include "serving/http/http_types.h"
#include "serving/engine/serving_engine.h"
#include "chat/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {

struct ApiError {
  int status = 400;
  std::string message;
  std::string param;  // the offending field ("" when none)
  std::string type = "invalid_request_error";
  std::string code;  // e.g. "model_not_found", "context_length_exceeded"
};

// A 400 invalid_request_error about `param`.
inline ApiError bad_request(const std::string& param, const std::string& message) {
  return ApiError{400, message, param, "invalid_request_error", ""};
}

// {"error": {"message", "type", "param", "code"}}
std::string api_error_body(const ApiError& e);
// The error as a response: its status and body.
HttpResponse error_response(const ApiError& e);
// A 500 for an exception nobody expected (a route, a deferred answer).
HttpResponse internal_error_response(const std::exception& e);
// JSON as sent: compact, invalid UTF-8 replaced rather than thrown on.
std::string json_text(const nlohmann::json& j);

// A request body parsed with bounds, checked while it is read (before the
// document is built): nesting at most kMaxJsonDepth deep and at most
// kMaxJsonValues values. Anything else, or invalid JSON, is an ApiError 400
// naming the problem. (A body of a million nested arrays cost ~75 MB of
// memory per request before, even in a field nobody reads.)
constexpr int kMaxJsonDepth = 64;
constexpr int64_t kMaxJsonValues = 1 << 20;
nlohmann::ordered_json parse_body(const std::string& body);
// o[key] when o is an object holding a string there, else "" (ordered_json::value throws for a value of another
// type: a 500 where the request deserves the 400 that names the field).
std::string string_or_empty(const nlohmann::ordered_json& o, const char* key);

class VisionEncoder;
class AudioEncoder;

// Images and audio in chat requests (serve --mmproj): where media parts are read and turned into the prompt's rows.
struct MediaSupport {
  VisionEncoder* vision = nullptr;  // null: image parts are refused
  AudioEncoder* audio = nullptr;    // null: input_audio parts are refused
  std::string marker;      // the media marker of this process in rendered prompts (random: no text spells it)
  std::string media_path;  // --media-path: file:// URLs are read under this folder ("": refused)
  // --allow-media-urls: the body of an http(s) URL (throws naming why not); unset: such URLs are refused.
  std::function<std::string(const std::string& url)> fetch;
  size_t max_bytes = 20u << 20;     // one image's file
  int64_t max_pixels = 50'000'000;  // one image, decoded
  size_t max_audio_bytes = 64u << 20;  // one audio file
  double max_audio_seconds = 600;       // one audio file, from its header
  int max_images = 16;              // media inputs per request
  int64_t max_span = 1 << 30;       // the most rows of an image attended as a whole a step can take
  // Runs the encoding on the engine thread, between steps (the backend is the engine's).
  std::function<void(const std::function<void()>&)> run_encoder;
  // Told of each request's images once encoded: how many, how many were encoded, their rows, the seconds.
  std::function<void(int64_t images, int64_t encoded, int64_t tokens, double seconds)> on_encoded;
};

// One image or audio file of a request: its file's bytes, and where in the request it was (for errors).
struct MediaPart {
  std::string bytes;
  std::string param;
  bool audio = false;
};

struct ApiContext {
  const Tokenizer& tokenizer;
  std::vector<std::string> model_names;  // the names `model` may take (an absent `model` means the first)
  const ChatTemplate* chat_template;
  int64_t n_ctx;
  // Control tokens spelled inside message content become those tokens (off:
  // content is text; only the template's own markers are control tokens).
  bool allow_special_in_content = false;
  ToolCallFormat tool_format = ToolCallFormat::None;  // see ApiConfig
  const MediaSupport* media = nullptr;  // null: image parts are refused
};

struct ParsedRequest {
  // What every choice asks; its prompt (and max_tokens) is the first prompt's. A completions body may give a
  // list of prompts: `prompts` holds each with its max_tokens (choice index = prompt index * n + choice).
  ServeRequest serve;
  struct Prompt {
    std::vector<int32_t> tokens;
    int64_t max_tokens = 0;
  };
  std::vector<Prompt> prompts;
  std::string model;  // the name the request used, echoed in the answer
  bool stream = false;
  bool chat = false;
  bool include_usage_chunk = false;  // stream_options.include_usage
  bool reasoning_opened = false;
  bool tool_grammar_held = false;  // tool_choice "required" or named: the reply is held to calls
  bool token_ids_in_logprobs = false;  // return_tokens_as_token_ids
  // Anthropic's cache_control: the tokens of the prompt up to its last breakpoint (-1: no breakpoint).
  int64_t cache_breakpoint_tokens = -1;
  ToolCallFormat tool_format = ToolCallFormat::None;  // tools offered (and tool_choice not "none"): read calls so
  bool parallel_tool_calls = true;
  int n = 1;  // choices: one request each, sharing the prompt's KV through the prefix cache
  std::optional<std::vector<std::pair<int, float>>> lora;  // CompletionAsk::lora
};

// The chat request's messages (and chat_template_kwargs) through the model's
// template. Throws ApiError naming the message or field at fault, or carrying
// the template's own raise_exception message.
struct ChatPrompt {
  RenderedChat rendered;
  bool tools_offered = false;  // tools given and tool_choice not "none"
  bool parallel_tool_calls = true;
  std::string tool_grammar;    // tool_choice "required" or named: the GBNF every reply is held to
  std::vector<MediaPart> media;  // the images, in the order of their markers in the rendered text
};
// add_generation_prompt false: the conversation as a prefix (a cache breakpoint's tokens).
ChatPrompt render_chat_request(const ApiContext& ctx, const nlohmann::ordered_json& body,
                               bool add_generation_prompt = true);

// Every field of `o` (an object at `where`, "" for the body) is in `known` or null, or a 400 naming it
// ("unknown field 'where.key'"); `ignored` names fields that cannot change the answer, accepted too.
void check_known_fields(const nlohmann::ordered_json& o, const std::string& where, const std::set<std::string>& known,
                        const std::set<std::string>& ignored = {});

// A field holding one prompt or several — a string, an array of strings, an array of token ids, or an array of
// them — as token lists (text tokenized with the BOS the vocabulary adds). At most max_items; an empty one is a
// 400 naming it (`key[i]` in a list). check_bytes: a text whose byte length alone proves it cannot fit the
// context is refused before it is tokenized.
std::vector<std::vector<int32_t>> token_prompts(const ApiContext& ctx, const nlohmann::ordered_json& j,
                                                const std::string& key, size_t max_items, bool check_bytes);

// A text whose byte length alone proves it cannot fit the context is a 400 naming `param` (before it is
// tokenized: a 4 MiB prompt took 1.5 s of CPU to tokenize only to be refused).
void check_prompt_bytes(const ApiContext& ctx, size_t bytes, const std::string& param);

// Every field of a completion (chat: true) body is one the server implements, or a 400 naming it.
void check_request_fields(const nlohmann::ordered_json& body, bool chat);

// The body's `model` (the first served name when absent); an unknown one is a 404.
std::string checked_model_name(const ApiContext& ctx, const nlohmann::ordered_json& body);
std::string model_not_found_message(const std::string& name, const std::vector<std::string>& served);

// A /v1/completions (chat: /v1/chat/completions) body read (completion_ask.h's openai_ask) and prepared
// (prepare_completion). Throws ApiError. body: the raw request body.
ParsedRequest parse_completion_request(const ApiContext& ctx, const std::string& body, bool chat);

}  // namespace kestrel

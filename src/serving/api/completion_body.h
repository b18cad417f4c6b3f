#pragma once
// The JSON of a completion's answers, in the OpenAI shapes: the whole
// answer, stream chunks, usage, finish reasons and logprobs. One envelope
// (id, object, created, model) serves every body, streamed or not.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>
#include <string>

#include "chat/reply_parser.h"
#include "serving/api/reply_events.h"
#include "serving/engine/serving_engine.h"

namespace kestrel {

// Who a completion's bodies belong to, and how their logprobs name tokens.
struct CompletionIds {
  std::string id;  // "chatcmpl-7", "cmpl-7"
  bool chat = false;
  int64_t created = 0;  // unix seconds
  std::string model;
  bool token_ids = false;  // vLLM's return_tokens_as_token_ids: "token_id:42" for a token's text
  int n = 1;               // choices per prompt: usage counts each prompt once
};

// {"id", "object", "created", "model", "choices"}; object per kind and shape.
nlohmann::json completion_envelope(const CompletionIds& ids, bool chunk, nlohmann::json choices);
// OpenAI's usage object (prompt_tokens_details.cached_tokens among it).
nlohmann::json usage_json(const ReplyUsage& u);
// Ours are "stop", "length", "cancelled", "error"; none yet: null.
nlohmann::json finish_json(const std::string& reason);

// Logprobs of a run of token events, in the completions or the chat shape. An echoed prompt's tokens come
// first (completions), the first with a null logprob and null alternatives. Chat entries carry each token's
// UTF-8 `bytes` (a token may hold part of a character); the completions shape has no entries to put them on.
class Logprobs {
 public:
  // start_offset: characters of the completion before these events (a stream's earlier chunks).
  // token_ids: tokens named "token_id:42" (vLLM's return_tokens_as_token_ids), not by their text.
  explicit Logprobs(bool chat, size_t start_offset = 0, bool token_ids = false)
      : chat_(chat), token_ids_(token_ids), offset_(start_offset) {}
  void add(const StreamEvent& e);
  nlohmann::json result() const;
  // A token event's entry in the chat shape (token, logprob, bytes, top_logprobs), as add puts it in `content`
  // (and as Ollama's and the Responses API's logprobs carry it).
  nlohmann::json chat_entry(const StreamEvent& e) const;
  // Characters of text the events so far carried, from the start of the completion.
  size_t end_offset() const { return offset_; }

 private:
  std::string name(const TokenLogprob& t) const;
  bool chat_, token_ids_;
  nlohmann::json tokens_ = nlohmann::json::array(), token_logprobs_ = nlohmann::json::array(),
                 top_ = nlohmann::json::array(), offsets_ = nlohmann::json::array(), chat_content_ = nlohmann::json::array();
  size_t offset_ = 0;
};

// One choice of a non-streamed answer: text (completions) or a message. A stop string that ended it is named
// in `stop_reason` (vLLM's field). Parsed (a chat with reasoning or tools): reasoning_content (left out when
// empty), content (null when the reply is only tool calls), tool_calls, finish_reason "tool_calls" when the
// model stopped after calling.
nlohmann::json whole_choice(const CompletionIds& ids, size_t index, const ReplyWhole& reply, bool parsed,
                            const nlohmann::json& logprobs);
// The whole answer: the choices and the usage.
std::string whole_completion_body(const CompletionIds& ids, nlohmann::json choices, const ReplyUsage& usage);
// OpenAI's tool_calls array; in a stream each call also carries its index.
nlohmann::json tool_calls_json(const std::vector<ToolCall>& calls, bool stream);

// One server-sent event: "data: <json>\n\n".
std::string sse_event(const nlohmann::json& j);

}  // namespace kestrel

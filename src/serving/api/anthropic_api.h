#pragma once
// Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens) over
// the chat route. A body is checked field by field (an unknown one is a 400
// naming it) and put in the OpenAI chat shape the rest of the server reads:
// `system` first, tool_result blocks as tool messages, tool_use blocks as an
// assistant's tool_calls, thinking blocks as its reasoning_content, `tools`
// as functions, `thinking` as the template's switch. The answer is the chat
// completion re-spoken: a message of content blocks, or Anthropic's event
// stream (message_start, content_block_start/delta/stop, message_delta,
// message_stop, ping), errors in Anthropic's error shape.
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "serving/http/http_types.h"
#include "serving/api/openai_api.h"
#include "serving/api/stream_transcoder.h"

namespace kestrel {

// The /v1/messages body as an OpenAI chat body (stream: with include_usage).
// count_only: /v1/messages/count_tokens (no max_tokens, no sampling fields).
// Throws ApiError naming the Anthropic field at fault.
nlohmann::ordered_json anthropic_to_chat(const nlohmann::ordered_json& body, const ChatTemplate& tmpl, bool count_only);

// {"type": "error", "error": {"type", "message"}}, the type by status.
std::string anthropic_error_body(const ApiError& e);
HttpResponse anthropic_error_response(const ApiError& e);

// Names the answer's message: its id and model, and the prompt's size for
// message_start's usage (the stream states it before any token).
struct AnthropicIds {
  std::string id;  // "msg_7"
  std::string model;
  int64_t input_tokens = 0;
};

// A whole chat completion's body (OpenAI shape) as an Anthropic message.
nlohmann::json anthropic_message(const nlohmann::json& chat_completion, const AnthropicIds& ids);

// The non-streamed answer: the chat completion's, converted when it is ready.
class AnthropicWhole : public DeferredResponse {
 public:
  AnthropicWhole(std::shared_ptr<DeferredResponse> chat, AnthropicIds ids) : chat_(std::move(chat)), ids_(std::move(ids)) {}
  void on_ready(std::function<void()> ready) override { chat_->on_ready(std::move(ready)); }
  std::optional<HttpResponse> poll() override;
  void close(bool completed) override { chat_->close(completed); }

 private:
  std::shared_ptr<DeferredResponse> chat_;
  AnthropicIds ids_;
};

// The streamed answer: the chat completion's server-sent chunks read as they
// come and said again as Anthropic's events, one content block at a time
// (thinking, text, each tool_use with its input as one input_json_delta).
class AnthropicStream : public BodyStream, StreamTranscoder {
 public:
  AnthropicStream(std::shared_ptr<BodyStream> chat, AnthropicIds ids) : StreamTranscoder(std::move(chat)), ids_(std::move(ids)) {}
  void on_ready(std::function<void()> ready) override { chat_->on_ready(std::move(ready)); }
  StreamStep poll(std::string& out) override;
  void close(bool completed) override { chat_->close(completed); }

 private:
  void on_chunk(const nlohmann::json& c, std::string& out) override;
  void on_error(std::string& out) override;
  void on_done(std::string& out) override;
  void open_block(const char* type, std::string& out, const nlohmann::json& extra = nlohmann::json::object());
  void close_block(std::string& out);

  AnthropicIds ids_;
  bool started_ = false;
  int index_ = -1;          // the open block's index (-1: none yet)
  std::string open_;        // the open block's type ("" when none is open)
  std::string stop_reason_ = "end_turn", stop_sequence_;
};

}  // namespace kestrel

#pragma once
// Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens). A
// body is checked field by field (an unknown one is a 400 naming it) into a
// chat ask, its conversation in the shape chat templates read: `system`
// first, tool_result blocks as tool messages, tool_use blocks as an
// assistant's tool_calls, thinking blocks as its reasoning_content, `tools`
// as functions, `thinking` as the template's switch and budget. The answer
// is said from the reply's events: a message of content blocks, or
// Anthropic's event stream (message_start, content_block_start/delta/stop,
// message_delta, message_stop, ping), errors in Anthropic's error shape.
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "serving/http/http_types.h"
#include "serving/api/openai_api.h"
#include "serving/api/completion_ask.h"
#include "serving/api/reply_events.h"

namespace kestrel {

// The /v1/messages body as a chat ask. count_only: /v1/messages/count_tokens (no max_tokens, no sampling fields).
// Throws ApiError naming the Anthropic field at fault.
CompletionAsk anthropic_ask(const nlohmann::ordered_json& body, const ApiContext& ctx, bool count_only);

// {"type": "error", "error": {"type", "message"}}, the type by status.
std::string anthropic_error_body(const ApiError& e);
HttpResponse anthropic_error_response(const ApiError& e);

// Names the answer's message: its id and model, and the prompt's size for
// message_start's usage (the stream states it before any token).
struct AnthropicIds {
  std::string id;  // "msg_7"
  std::string model;
  int64_t input_tokens = 0;
  int64_t cache_breakpoint_tokens = -1;  // the prompt's tokens up to its last cache_control breakpoint (-1: none)
};

// The answer, from the reply's events: whole, a message of content blocks (thinking, text, tool_use); streamed,
// Anthropic's events, one content block at a time (thinking, text, each tool_use with its input as one
// input_json_delta). Usage: cache_read_input_tokens is the prefix cache's hit, cache_creation_input_tokens the prefix up
// to the last cache_control breakpoint that was not a hit, input_tokens the rest.
class AnthropicAnswer : public BodyStream, public DeferredResponse, ReplyReader {
 public:
  AnthropicAnswer(std::shared_ptr<ReplyEvents> events, AnthropicIds ids, bool stream)
      : ReplyReader(std::move(events)), ids_(std::move(ids)), stream_(stream) {}
  void on_ready(std::function<void()> ready) override { events_->on_ready(std::move(ready)); }
  StreamStep poll(std::string& out) override;   // stream: true
  std::optional<HttpResponse> poll() override;  // stream: false
  void close(bool) override { events_->close(); }

 private:
  void on_event(const ReplyEvent& e, std::string& out) override;
  void on_error(std::string& out) override;
  void on_done(std::string& out) override;
  void open_block(const char* type, std::string& out, const nlohmann::json& extra = nlohmann::json::object());
  void close_block(std::string& out);
  nlohmann::json message() const;
  nlohmann::json input_usage(const ReplyUsage& u) const;

  AnthropicIds ids_;
  bool stream_;
  ReplyWhole whole_;  // the reply so far
  bool started_ = false;
  int index_ = -1;    // the open block's index (-1: none yet)
  std::string open_;  // the open block's type ("" when none is open)
};

}  // namespace kestrel

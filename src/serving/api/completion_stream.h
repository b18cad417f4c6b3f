#pragma once
// A streamed completion as server-sent events: (chat: a first chunk with the
// role), one chunk per generated token (as OpenAI and vLLM stream, so a
// client times every token even when several arrive at once), the final
// chunk with finish_reason and usage (and, if asked, a usage-only chunk as
// OpenAI sends it), then [DONE]. A client that goes away cancels its
// request at the engine's next step; so does one that reads too slowly
// (RequestChannel::kMaxPending): its stream is cut, not buffered without end.
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "chat/reply_parser.h"
#include "serving/api/completion_body.h"
#include "serving/api/reply_events.h"
#include "serving/http/http_types.h"
#include "serving/engine/serving_engine.h"

namespace kestrel {

class CompletionStream : public BodyStream, ReplyReader {
 public:
  // The reply's events (n > 1: chunks carry the choice's index); with a parser, chat text comes as
  // reasoning_content, content and tool_calls deltas.
  CompletionStream(std::shared_ptr<ReplyEvents> events, CompletionIds ids, bool want_logprobs, bool include_usage);
  // One request: its channel, the end callback (request log) and parser as ReplyEvents takes them.
  CompletionStream(std::shared_ptr<RequestChannel> channel, CompletionIds ids, bool want_logprobs, bool include_usage,
                   std::function<void(const StreamEvent&)> on_end, std::optional<ReplyParser> reply = std::nullopt);
  void on_ready(std::function<void()> ready) override { events_->on_ready(std::move(ready)); }
  // Appends the events for what the engine has produced so far.
  StreamStep poll(std::string& out) override;
  // The response is over: requests that did not finish are cancelled.
  void close(bool) override { events_->close(); }

 private:
  void on_event(const ReplyEvent& e, std::string& out) override;
  void on_error(std::string& out) override;
  void on_done(std::string& out) override;
  void add_chunk(std::string& out, const nlohmann::json& choice) const;
  nlohmann::json text_choice(const ReplyEvent& e, const nlohmann::json& logprobs) const;

  std::vector<size_t> text_offsets_;  // per choice: characters streamed so far (where a chunk's text_offset starts)
  CompletionIds ids_;
  bool want_logprobs_, include_usage_;
  bool started_ = false;
};

}  // namespace kestrel

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
#include "serving/http/http_types.h"
#include "serving/engine/serving_engine.h"

namespace kestrel {

class CompletionStream : public BodyStream {
 public:
  // One request per choice (n > 1: choice i is channels[i], chunks carry its
  // index); reply: chat text split into reasoning_content, content and
  // tool_calls deltas, a parser per choice. on_end: called once per choice
  // with its end event (for the request log).
  CompletionStream(std::vector<std::shared_ptr<RequestChannel>> channels, CompletionIds ids, bool want_logprobs,
                   bool include_usage, std::function<void(const StreamEvent&)> on_end,
                   std::optional<ReplyParser> reply = std::nullopt);
  CompletionStream(std::shared_ptr<RequestChannel> channel, CompletionIds ids, bool want_logprobs, bool include_usage,
                   std::function<void(const StreamEvent&)> on_end, std::optional<ReplyParser> reply = std::nullopt);
  void on_ready(std::function<void()> ready) override;
  // Appends the events for what the engine has produced so far.
  StreamStep poll(std::string& out) override;
  // The response is over: requests that did not finish are cancelled.
  void close(bool completed) override;

 private:
  struct Choice {
    std::shared_ptr<RequestChannel> channel;
    std::optional<ReplyParser> reply;
    size_t text_offset = 0;  // characters streamed so far: where the next chunk's text_offset starts
    bool finished = false;
    StreamEvent end{};
  };
  void add_chunk(std::string& out, const nlohmann::json& choice) const;
  nlohmann::json text_choice(Choice& ch, size_t index, const std::string& text, const nlohmann::json& logprobs,
                             const nlohmann::json& finish) const;
  StreamStep finish(std::string& out);
  StreamStep fail(std::string& out, const StreamEvent& end);

  std::vector<Choice> choices_;
  CompletionIds ids_;
  bool want_logprobs_, include_usage_;
  std::function<void(const StreamEvent&)> on_end_;
  bool started_ = false, finished_ = false;
};

}  // namespace kestrel

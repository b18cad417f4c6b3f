#pragma once
// A completion answered in one body ("stream": false): the engine's events
// are gathered as they come (on the transport's thread, when told they are
// ready), and the response exists once the request ends. Closing it before
// then (the client left) cancels the request.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chat/reply_parser.h"
#include "serving/api/completion_body.h"
#include "serving/http/http_types.h"
#include "serving/engine/serving_engine.h"

namespace kestrel {

class WholeCompletion : public DeferredResponse {
 public:
  // One request per choice (n > 1: choice i is channels[i]); reply: the chat
  // answer split into reasoning_content, content and tool_calls, a parser per
  // choice. on_end: called once per choice with its end event (request log).
  WholeCompletion(std::vector<std::shared_ptr<RequestChannel>> channels, CompletionIds ids, bool want_logprobs,
                  std::function<void(const StreamEvent&)> on_end, std::optional<ReplyParser> reply = std::nullopt);
  WholeCompletion(std::shared_ptr<RequestChannel> channel, CompletionIds ids, bool want_logprobs,
                  std::function<void(const StreamEvent&)> on_end, std::optional<ReplyParser> reply = std::nullopt);
  void on_ready(std::function<void()> ready) override;
  std::optional<HttpResponse> poll() override;
  void close(bool completed) override;

 private:
  struct Choice {
    std::shared_ptr<RequestChannel> channel;
    std::optional<ReplyParser> reply;
    Logprobs logprobs;
    std::string text{};
    bool finished = false;
    StreamEvent end{};
  };
  std::vector<Choice> choices_;
  CompletionIds ids_;
  bool want_logprobs_;
  std::function<void(const StreamEvent&)> on_end_;
  bool finished_ = false;
};

}  // namespace kestrel

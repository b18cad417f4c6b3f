#pragma once
// A completion answered in one body ("stream": false): the engine's events
// are gathered as they come (on the transport's thread, when told they are
// ready), and the response exists once the request ends. Closing it before
// then (the client left) cancels the request.
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "chat/reply_parser.h"
#include "serving/completion_body.h"
#include "serving/http_types.h"
#include "serving/serving_engine.h"

namespace kestrel {

class WholeCompletion : public DeferredResponse {
 public:
  // on_end: called once with the request's end event (for the request log).
  // reply: the chat answer split into reasoning_content, content and tool_calls.
  WholeCompletion(std::shared_ptr<RequestChannel> channel, CompletionIds ids, bool want_logprobs,
                  std::function<void(const StreamEvent&)> on_end, std::optional<ReplyParser> reply = std::nullopt);
  void on_ready(std::function<void()> ready) override { channel_->on_ready(std::move(ready)); }
  std::optional<HttpResponse> poll() override;
  void close(bool completed) override;

 private:
  std::shared_ptr<RequestChannel> channel_;
  CompletionIds ids_;
  bool want_logprobs_;
  std::function<void(const StreamEvent&)> on_end_;
  std::string text_;
  Logprobs logprobs_;
  std::optional<ReplyParser> reply_;
  bool finished_ = false;
};

}  // namespace kestrel

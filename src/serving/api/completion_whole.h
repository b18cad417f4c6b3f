#pragma once
// A completion answered in one body ("stream": false): the reply's events
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
#include "serving/api/reply_events.h"
#include "serving/http/http_types.h"
#include "serving/engine/serving_engine.h"

namespace kestrel {

class WholeCompletion : public DeferredResponse, ReplyReader {
 public:
  // The reply's events (n > 1: one choice each); with a parser, the chat answer comes split into
  // reasoning_content, content and tool_calls.
  WholeCompletion(std::shared_ptr<ReplyEvents> events, CompletionIds ids, bool want_logprobs);
  // One request: its channel, the end callback (request log) and parser as ReplyEvents takes them.
  WholeCompletion(std::shared_ptr<RequestChannel> channel, CompletionIds ids, bool want_logprobs,
                  std::function<void(const StreamEvent&)> on_end, std::optional<ReplyParser> reply = std::nullopt);
  void on_ready(std::function<void()> ready) override { events_->on_ready(std::move(ready)); }
  std::optional<HttpResponse> poll() override;
  void close(bool) override { events_->close(); }

 private:
  void on_event(const ReplyEvent& e, std::string& out) override;
  void on_done(std::string&) override {}
  std::string body() const;

  struct Choice {
    ReplyWhole reply;
    Logprobs logprobs;
  };
  std::vector<Choice> choices_;
  CompletionIds ids_;
  bool want_logprobs_;
};

}  // namespace kestrel

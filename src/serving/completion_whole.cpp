#include "serving/completion_whole.h"

#include <utility>

#include "serving/openai_api.h"

namespace kestrel {

WholeCompletion::WholeCompletion(std::shared_ptr<RequestChannel> channel, CompletionIds ids, bool want_logprobs,
                                 std::function<void(const StreamEvent&)> on_end, std::optional<ReplyParser> reply)
    : channel_(std::move(channel)),
      ids_(std::move(ids)),
      want_logprobs_(want_logprobs),
      on_end_(std::move(on_end)),
      logprobs_(ids_.chat, 0, ids_.token_ids),
      reply_(std::move(reply)) {}

std::optional<HttpResponse> WholeCompletion::poll() {
  if (finished_) return std::nullopt;
  for (auto& e : channel_->take()) {
    text_ += e.text;
    if (want_logprobs_) logprobs_.add(e);
    if (!e.done) continue;
    finished_ = true;
    if (on_end_) on_end_(e);
    if (e.finish_reason == "error")
      return error_response({500, "generation failed: " + e.error, "", "server_error", ""});
    if (!reply_)
      return json_response(whole_completion_body(ids_, text_, want_logprobs_ ? logprobs_.result() : nlohmann::json(nullptr), e));
    ReplyPart a = reply_->push(text_), b = reply_->finish();
    a.reasoning += b.reasoning;
    a.content += b.content;
    a.calls = std::move(b.calls);
    return json_response(whole_completion_body(ids_, a, want_logprobs_ ? logprobs_.result() : nlohmann::json(nullptr), e));
  }
  return std::nullopt;
}

void WholeCompletion::close(bool) {
  if (!finished_) channel_->cancel();
}

}  // namespace kestrel

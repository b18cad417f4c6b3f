#include "serving/api/completion_whole.h"

#include <utility>

#include "serving/api/openai_api.h"

namespace kestrel {

WholeCompletion::WholeCompletion(std::shared_ptr<ReplyEvents> events, CompletionIds ids, bool want_logprobs)
    : ReplyReader(std::move(events)), ids_(std::move(ids)), want_logprobs_(want_logprobs) {
  for (size_t i = 0; i < events_->choices(); i++) choices_.push_back({{}, Logprobs(ids_.chat, 0, ids_.token_ids)});
}

WholeCompletion::WholeCompletion(std::shared_ptr<RequestChannel> channel, CompletionIds ids, bool want_logprobs,
                                 std::function<void(const StreamEvent&)> on_end, std::optional<ReplyParser> reply)
    : WholeCompletion(std::make_shared<ReplyEvents>(std::vector<std::shared_ptr<RequestChannel>>{std::move(channel)},
                                                    std::move(reply), std::move(on_end)),
                      std::move(ids), want_logprobs) {}

void WholeCompletion::on_event(const ReplyEvent& e, std::string&) {
  Choice& c = choices_[e.choice];
  c.reply.add(e);
  if (want_logprobs_) c.logprobs.add(e.engine);
}

std::string WholeCompletion::body() const {
  nlohmann::json choices = nlohmann::json::array();
  for (size_t i = 0; i < choices_.size(); i++)
    choices.push_back(whole_choice(ids_, i, choices_[i].reply, events_->parsed(),
                                   want_logprobs_ ? choices_[i].logprobs.result() : nlohmann::json(nullptr)));
  return whole_completion_body(ids_, std::move(choices), events_->usage(ids_.n));
}

std::optional<HttpResponse> WholeCompletion::poll() {
  std::string unused;
  return whole(read(unused), [&] { return body(); }, error_response);
}

}  // namespace kestrel

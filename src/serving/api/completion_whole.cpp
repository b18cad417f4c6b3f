#include "serving/api/completion_whole.h"

#include <utility>

#include "serving/api/openai_api.h"

namespace kestrel {

WholeCompletion::WholeCompletion(std::vector<std::shared_ptr<RequestChannel>> channels, CompletionIds ids,
                                 bool want_logprobs, std::function<void(const StreamEvent&)> on_end,
                                 std::optional<ReplyParser> reply)
    : ids_(std::move(ids)), want_logprobs_(want_logprobs), on_end_(std::move(on_end)) {
  for (auto& ch : channels) choices_.push_back({.channel = std::move(ch), .reply = reply, .logprobs = Logprobs(ids_.chat, 0, ids_.token_ids)});
}

WholeCompletion::WholeCompletion(std::shared_ptr<RequestChannel> channel, CompletionIds ids, bool want_logprobs,
                                 std::function<void(const StreamEvent&)> on_end, std::optional<ReplyParser> reply)
    : WholeCompletion(std::vector<std::shared_ptr<RequestChannel>>{std::move(channel)}, std::move(ids), want_logprobs,
                      std::move(on_end), std::move(reply)) {}

void WholeCompletion::on_ready(std::function<void()> ready) {
  for (auto& c : choices_) c.channel->on_ready(ready);
}

std::optional<HttpResponse> WholeCompletion::poll() {
  if (finished_) return std::nullopt;
  size_t done = 0;
  for (auto& c : choices_) {
    if (!c.finished) {
      for (auto& e : c.channel->take()) {
        c.text += e.text;
        if (want_logprobs_) c.logprobs.add(e);
        if (!e.done) continue;
        c.finished = true;
        c.end = e;
        if (on_end_) on_end_(e);
        if (e.finish_reason == "error") {
          finished_ = true;
          close(false);  // the other choices are not wanted any more
          return error_response({500, "generation failed: " + e.error, "", "server_error", ""});
        }
        break;
      }
    }
    done += c.finished;
  }
  if (done < choices_.size()) return std::nullopt;
  finished_ = true;
  nlohmann::json choices = nlohmann::json::array();
  std::vector<StreamEvent> ends;
  for (size_t i = 0; i < choices_.size(); i++) {
    Choice& c = choices_[i];
    const nlohmann::json lp = want_logprobs_ ? c.logprobs.result() : nlohmann::json(nullptr);
    ends.push_back(c.end);
    if (!c.reply) {
      choices.push_back(whole_choice(ids_, i, c.text, lp, c.end));
      continue;
    }
    choices.push_back(whole_chat_choice(i, c.reply->finish(c.text), lp, c.end));
  }
  return json_response(whole_completion_body(ids_, std::move(choices), ends));
}

void WholeCompletion::close(bool) {
  for (auto& c : choices_)
    if (!c.finished) c.channel->cancel();
}

}  // namespace kestrel

#include "serving/api/reply_events.h"

#include <algorithm>
#include <utility>

namespace kestrel {

namespace {
ReplyPart plain(const std::string& text) {  // a reply without a parser: all of it content
  ReplyPart p;
  p.content = text;
  return p;
}
}  // namespace

std::string ReplyEvent::finish_reason() const {
  if (engine.finish_reason == "stop" && !part.calls.empty()) return "tool_calls";
  return engine.finish_reason;
}

void ReplyWhole::add(const ReplyEvent& e) {
  text += e.engine.text;
  part.reasoning += e.part.reasoning;
  part.content += e.part.content;
  for (const auto& c : e.part.calls) part.calls.push_back(c);
  if (e.end()) end = e.engine;
}

std::optional<std::string> ReplyWhole::content_beside_calls() const {
  const std::string& c = part.content;
  if (part.calls.empty()) return c;
  const size_t b = c.find_first_not_of(" \n\r\t"), e = c.find_last_not_of(" \n\r\t");
  if (b == std::string::npos) return std::nullopt;
  return c.substr(b, e + 1 - b);
}

ReplyEvents::ReplyEvents(std::vector<std::shared_ptr<RequestChannel>> channels, std::optional<ReplyParser> reply,
                         std::function<void(const StreamEvent&)> on_end)
    : on_end_(std::move(on_end)), parsed_(reply.has_value()) {
  for (auto& ch : channels) choices_.push_back({.channel = std::move(ch), .reply = reply});
}

void ReplyEvents::on_ready(std::function<void()> ready) {
  for (auto& c : choices_) c.channel->on_ready(ready);
}

StreamStep ReplyEvents::poll(std::vector<ReplyEvent>& out) {
  if (over_) return *over_;
  size_t done = 0;
  for (size_t i = 0; i < choices_.size(); i++) {
    Choice& ch = choices_[i];
    if (!ch.finished) {
      for (auto& e : ch.channel->take()) {
        if (!e.done) {
          ReplyPart part = ch.reply ? ch.reply->push(e.text) : plain(e.text);
          out.push_back({i, std::move(e), std::move(part)});
          continue;
        }
        ch.finished = true;
        ch.end = e;
        if (on_end_) on_end_(e);
        if (ch.channel->overflowed()) {  // the client read too slowly: cut, not a proper end
          close();
          return *(over_ = StreamStep::Abort);
        }
        if (e.finish_reason == "error") {
          error_ = e.error.empty() ? "generation failed" : e.error;
          close();  // the other choices are not wanted any more
          return *(over_ = StreamStep::Done);
        }
        ReplyPart part = ch.reply ? ch.reply->finish(e.text) : plain(e.text);
        out.push_back({i, std::move(e), std::move(part)});
        break;
      }
    }
    done += ch.finished;
  }
  if (done < choices_.size()) return StreamStep::More;
  return *(over_ = StreamStep::Done);
}

void ReplyEvents::close() {
  for (auto& c : choices_)
    if (!c.finished) c.channel->cancel();
}

ReplyUsage ReplyEvents::usage(int n) const {
  ReplyUsage u;
  for (size_t i = 0; i < choices_.size(); i++) {
    const StreamEvent& end = choices_[i].end;
    u.completion += end.completion_tokens;
    if (i % static_cast<size_t>(std::max(n, 1)) != 0) continue;
    u.prompt += end.prompt_tokens;
    u.cached += end.cached_tokens;
  }
  return u;
}

StreamStep ReplyReader::read(std::string& out) {
  if (done_) return StreamStep::Done;
  std::vector<ReplyEvent> events;
  const StreamStep s = events_->poll(events);
  for (const auto& e : events) on_event(e, out);
  if (s == StreamStep::More) return s;
  if (s == StreamStep::Abort) return s;
  done_ = true;
  if (!events_->error().empty()) {
    error_ = events_->error();
    on_error(out);
  }
  on_done(out);
  return StreamStep::Done;
}

std::optional<HttpResponse> ReplyReader::whole(StreamStep s, const std::function<std::string()>& answer,
                                               HttpResponse (*failure)(const ApiError&)) const {
  if (s == StreamStep::More) return std::nullopt;
  if (s == StreamStep::Abort) return failure({500, "the request ended early", "", "server_error", ""});
  if (!error_.empty()) return failure({500, "generation failed: " + error_, "", "server_error", ""});
  return json_response(answer());
}

}  // namespace kestrel

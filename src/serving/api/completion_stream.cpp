#include "serving/api/completion_stream.h"

#include <utility>

#include "serving/api/openai_api.h"

namespace kestrel {

using json = nlohmann::json;

CompletionStream::CompletionStream(std::vector<std::shared_ptr<RequestChannel>> channels, CompletionIds ids,
                                   bool want_logprobs, bool include_usage,
                                   std::function<void(const StreamEvent&)> on_end, std::optional<ReplyParser> reply)
    : ids_(std::move(ids)), want_logprobs_(want_logprobs), include_usage_(include_usage), on_end_(std::move(on_end)) {
  for (auto& ch : channels) choices_.push_back({.channel = std::move(ch), .reply = reply});
}

CompletionStream::CompletionStream(std::shared_ptr<RequestChannel> channel, CompletionIds ids, bool want_logprobs,
                                   bool include_usage, std::function<void(const StreamEvent&)> on_end,
                                   std::optional<ReplyParser> reply)
    : CompletionStream(std::vector<std::shared_ptr<RequestChannel>>{std::move(channel)}, std::move(ids), want_logprobs,
                       include_usage, std::move(on_end), std::move(reply)) {}

void CompletionStream::on_ready(std::function<void()> ready) {
  for (auto& c : choices_) c.channel->on_ready(ready);
}

void CompletionStream::add_chunk(std::string& out, const json& choice) const {
  out += sse_event(completion_envelope(ids_, true, json::array({choice})));
}

json CompletionStream::text_choice(Choice& ch, size_t index, const std::string& text, const json& logprobs,
                                   const json& finish) const {
  json c = {{"index", index}, {"finish_reason", finish}, {"logprobs", logprobs}};
  if (!ids_.chat) {
    c["text"] = text;
    return c;
  }
  if (!ch.reply) {
    c["delta"] = text.empty() && !finish.is_null() ? json::object() : json{{"content", text}};
    return c;
  }
  // Thinking, answer and calls as separate fields of the delta (vLLM's and llama.cpp's shape).
  const ReplyPart part = finish.is_null() ? ch.reply->push(text) : ch.reply->finish(text);
  if (!part.calls.empty() && finish == "stop") c["finish_reason"] = "tool_calls";
  json delta = json::object();
  if (!part.reasoning.empty()) delta["reasoning_content"] = part.reasoning;
  if (!part.content.empty() || (delta.empty() && finish.is_null())) delta["content"] = part.content;
  if (!part.calls.empty()) delta["tool_calls"] = tool_calls_json(part.calls, true);
  c["delta"] = delta;
  return c;
}

StreamStep CompletionStream::poll(std::string& out) {
  if (finished_) return StreamStep::Done;
  if (ids_.chat && !started_) {
    started_ = true;
    for (size_t i = 0; i < choices_.size(); i++)
      add_chunk(out, {{"index", i}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"finish_reason", nullptr}});
  }
  size_t done = 0;
  for (size_t i = 0; i < choices_.size(); i++) {
    Choice& ch = choices_[i];
    if (!ch.finished) {
      for (auto& e : ch.channel->take()) {
        if (e.done) {
          if (ch.channel->overflowed()) {  // the client read too slowly: cut, not a proper end
            finished_ = true;
            if (on_end_) on_end_(e);
            return StreamStep::Abort;
          }
          ch.finished = true;
          ch.end = e;
          if (on_end_) on_end_(e);
          if (e.finish_reason == "error") return fail(out, e);
          // The choice's last chunk: its finish reason (and what the end released: held-back text).
          json last = text_choice(ch, i, e.text,
                                  want_logprobs_ ? Logprobs(ids_.chat, ch.text_offset, ids_.token_ids).result() : json(nullptr),
                                  finish_json(e.finish_reason));
          if (!e.stop_string.empty()) last["stop_reason"] = e.stop_string;  // vLLM's field: which stop string
          add_chunk(out, last);
          break;
        }
        Logprobs lp(ids_.chat, ch.text_offset, ids_.token_ids);
        if (want_logprobs_) lp.add(e);
        ch.text_offset = lp.end_offset();
        if (e.text.empty() && !(want_logprobs_ && e.has_token)) continue;  // held back (UTF-8 or a possible stop string)
        add_chunk(out, text_choice(ch, i, e.text, want_logprobs_ ? lp.result() : json(nullptr), nullptr));
      }
    }
    done += ch.finished;
  }
  return done == choices_.size() ? finish(out) : StreamStep::More;
}

StreamStep CompletionStream::fail(std::string& out, const StreamEvent& end) {
  finished_ = true;
  out += "data: " + api_error_body({500, "generation failed: " + end.error, "", "server_error", ""}) + "\n\n";
  out += "data: [DONE]\n\n";
  return StreamStep::Done;
}

StreamStep CompletionStream::finish(std::string& out) {
  finished_ = true;
  // Usage, when asked for, comes once, in a chunk of its own with no choices, as OpenAI sends it.
  if (include_usage_) {
    std::vector<StreamEvent> ends;
    for (const auto& c : choices_) ends.push_back(c.end);
    json usage_only = completion_envelope(ids_, true, json::array());
    usage_only["usage"] = usage_json(ends, ids_.n);
    out += sse_event(usage_only);
  }
  out += "data: [DONE]\n\n";
  return StreamStep::Done;
}

void CompletionStream::close(bool) {
  for (auto& c : choices_)
    if (!c.finished) c.channel->cancel();
}

}  // namespace kestrel

#include "serving/completion_stream.h"

#include <utility>

#include "serving/openai_api.h"

namespace kestrel {

using json = nlohmann::json;

CompletionStream::CompletionStream(std::shared_ptr<RequestChannel> channel, CompletionIds ids, bool want_logprobs,
                                   bool include_usage, std::function<void(const StreamEvent&)> on_end,
                                   std::optional<ReplyParser> reply)
    : channel_(std::move(channel)),
      ids_(std::move(ids)),
      want_logprobs_(want_logprobs),
      include_usage_(include_usage),
      on_end_(std::move(on_end)),
      reply_(std::move(reply)) {}

void CompletionStream::add_chunk(std::string& out, const json& choice) const {
  out += sse_event(completion_envelope(ids_, true, json::array({choice})));
}

json CompletionStream::text_choice(const std::string& text, const json& logprobs, const json& finish) {
  json c = {{"index", 0}, {"finish_reason", finish}, {"logprobs", logprobs}};
  if (!ids_.chat) {
    c["text"] = text;
    return c;
  }
  if (!reply_) {
    c["delta"] = text.empty() && !finish.is_null() ? json::object() : json{{"content", text}};
    return c;
  }
  // Thinking, answer and calls as separate fields of the delta (vLLM's and llama.cpp's shape).
  ReplyPart part = reply_->push(text);
  if (!finish.is_null()) {
    ReplyPart rest = reply_->finish();
    part.reasoning += rest.reasoning;
    part.content += rest.content;
    part.calls = std::move(rest.calls);
    if (!part.calls.empty() && finish == "stop") c["finish_reason"] = "tool_calls";
  }
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
    add_chunk(out, {{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"finish_reason", nullptr}});
  }
  for (auto& e : channel_->take()) {
    if (e.done) {
      if (channel_->overflowed()) {  // the client read too slowly: cut, not a proper end
        finished_ = true;
        if (on_end_) on_end_(e);
        return StreamStep::Abort;
      }
      return finish(out, e);
    }
    Logprobs lp(ids_.chat, text_offset_, ids_.token_ids);
    if (want_logprobs_) lp.add(e);
    text_offset_ = lp.end_offset();
    if (e.text.empty() && !(want_logprobs_ && e.has_token)) continue;  // held back (UTF-8 or a possible stop string)
    add_chunk(out, text_choice(e.text, want_logprobs_ ? lp.result() : json(nullptr), nullptr));
  }
  return StreamStep::More;
}

StreamStep CompletionStream::finish(std::string& out, const StreamEvent& end) {
  finished_ = true;
  if (on_end_) on_end_(end);
  if (end.finish_reason == "error") {
    out += "data: " + api_error_body({500, "generation failed: " + end.error, "", "server_error", ""}) + "\n\n";
  } else {
    // The final chunk carries the finish reason (and what the end released:
    // held-back text); usage, when asked for, comes once, in a chunk of its
    // own with no choices, as OpenAI sends it.
    out += sse_event(completion_envelope(
        ids_, true,
        json::array({text_choice(end.text, want_logprobs_ ? Logprobs(ids_.chat, text_offset_).result() : json(nullptr),
                                 finish_json(end.finish_reason))})));
    if (include_usage_) {
      json usage_only = completion_envelope(ids_, true, json::array());
      usage_only["usage"] = usage_json(end);
      out += sse_event(usage_only);
    }
  }
  out += "data: [DONE]\n\n";
  return StreamStep::Done;
}

void CompletionStream::close(bool) {
  if (!finished_) channel_->cancel();
}

}  // namespace kestrel

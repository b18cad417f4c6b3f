#include "serving/api/completion_stream.h"

#include <utility>

#include "serving/api/openai_api.h"

namespace kestrel {

using json = nlohmann::json;

CompletionStream::CompletionStream(std::shared_ptr<ReplyEvents> events, CompletionIds ids, bool want_logprobs,
                                   bool include_usage)
    : ReplyReader(std::move(events)),
      text_offsets_(events_->choices(), 0),
      ids_(std::move(ids)),
      want_logprobs_(want_logprobs),
      include_usage_(include_usage) {}

CompletionStream::CompletionStream(std::shared_ptr<RequestChannel> channel, CompletionIds ids, bool want_logprobs,
                                   bool include_usage, std::function<void(const StreamEvent&)> on_end,
                                   std::optional<ReplyParser> reply)
    : CompletionStream(std::make_shared<ReplyEvents>(std::vector<std::shared_ptr<RequestChannel>>{std::move(channel)},
                                                     std::move(reply), std::move(on_end)),
                       std::move(ids), want_logprobs, include_usage) {}

void CompletionStream::add_chunk(std::string& out, const json& choice) const {
  out += sse_event(completion_envelope(ids_, true, json::array({choice})));
}

json CompletionStream::text_choice(const ReplyEvent& e, const json& logprobs) const {
  const json finish = e.end() ? finish_json(e.finish_reason()) : json(nullptr);
  json c = {{"index", e.choice}, {"finish_reason", finish}, {"logprobs", logprobs}};
  if (e.end() && !e.engine.stop_string.empty()) c["stop_reason"] = e.engine.stop_string;  // vLLM's: which stop string
  if (!ids_.chat) {
    c["text"] = e.part.content;
    return c;
  }
  if (!events_->parsed()) {
    c["delta"] = e.part.content.empty() && e.end() ? json::object() : json{{"content", e.part.content}};
    return c;
  }
  // Thinking, answer and calls as separate fields of the delta (vLLM's and llama.cpp's shape).
  json delta = json::object();
  if (!e.part.reasoning.empty()) delta["reasoning_content"] = e.part.reasoning;
  if (!e.part.content.empty() || (delta.empty() && !e.end())) delta["content"] = e.part.content;
  if (!e.part.calls.empty()) delta["tool_calls"] = tool_calls_json(e.part.calls, true);
  c["delta"] = delta;
  return c;
}

StreamStep CompletionStream::poll(std::string& out) {
  if (ids_.chat && !started_) {
    started_ = true;
    for (size_t i = 0; i < events_->choices(); i++)
      add_chunk(out, {{"index", i}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"finish_reason", nullptr}});
  }
  return read(out);
}

void CompletionStream::on_event(const ReplyEvent& e, std::string& out) {
  size_t& offset = text_offsets_[e.choice];
  if (e.end()) {  // the choice's last chunk: its finish reason (and what the end released: held-back text)
    add_chunk(out, text_choice(e, want_logprobs_ ? Logprobs(ids_.chat, offset, ids_.token_ids).result() : json(nullptr)));
    return;
  }
  Logprobs lp(ids_.chat, offset, ids_.token_ids);
  if (want_logprobs_) lp.add(e.engine);
  offset = lp.end_offset();
  if (e.engine.text.empty() && !(want_logprobs_ && e.engine.has_token)) return;  // held back (UTF-8, a stop string)
  add_chunk(out, text_choice(e, want_logprobs_ ? lp.result() : json(nullptr)));
}

void CompletionStream::on_error(std::string& out) {
  out += "data: " + api_error_body({500, "generation failed: " + error_, "", "server_error", ""}) + "\n\n";
}

void CompletionStream::on_done(std::string& out) {
  // Usage, when asked for, comes once, in a chunk of its own with no choices, as OpenAI sends it (not after an
  // error).
  if (include_usage_ && error_.empty()) {
    json usage_only = completion_envelope(ids_, true, json::array());
    usage_only["usage"] = usage_json(events_->usage(ids_.n));
    out += sse_event(usage_only);
  }
  out += "data: [DONE]\n\n";
}

}  // namespace kestrel

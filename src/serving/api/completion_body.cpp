#include "serving/api/completion_body.h"

#include <algorithm>

#include "serving/api/openai_api.h"

namespace kestrel {

using json = nlohmann::json;

namespace {
size_t code_points(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}
}  // namespace

json completion_envelope(const CompletionIds& ids, bool chunk, json choices) {
  const char* object = ids.chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  return {{"id", ids.id}, {"object", object}, {"created", ids.created}, {"model", ids.model}, {"choices", std::move(choices)}};
}

json usage_json(const ReplyUsage& u) {
  return {{"prompt_tokens", u.prompt},
          {"completion_tokens", u.completion},
          {"total_tokens", u.prompt + u.completion},
          {"prompt_tokens_details", {{"cached_tokens", u.cached}}}};
}

json finish_json(const std::string& reason) { return reason.empty() ? json(nullptr) : json(reason); }

std::string Logprobs::name(const TokenLogprob& t) const {
  return token_ids_ ? "token_id:" + std::to_string(t.token) : t.text;
}

namespace {
json utf8_bytes(const std::string& s) {
  json out = json::array();
  for (const char c : s) out.push_back(static_cast<unsigned char>(c));
  return out;
}
}  // namespace

void Logprobs::add(const StreamEvent& e) {
  if (!e.has_token) {
    offset_ += code_points(e.text);  // an echoed prompt's text without logprobs
    return;
  }
  if (chat_) {
    chat_content_.push_back(chat_entry(e));
    return;
  }
  tokens_.push_back(name(e.token));
  if (e.null_logprob) {
    token_logprobs_.push_back(nullptr);
    top_.push_back(nullptr);
  } else {
    token_logprobs_.push_back(e.token.logprob);
    json alts = json::object();
    for (const auto& t : e.top) alts[name(t)] = t.logprob;
    top_.push_back(alts);
  }
  offsets_.push_back(offset_);
  offset_ += code_points(e.text);  // OpenAI's text_offset counts characters
}

json Logprobs::chat_entry(const StreamEvent& e) const {
  json alts = json::array();
  for (const auto& t : e.top) alts.push_back({{"token", name(t)}, {"logprob", t.logprob}, {"bytes", utf8_bytes(t.text)}});
  return {{"token", name(e.token)}, {"logprob", e.token.logprob}, {"bytes", utf8_bytes(e.token.text)}, {"top_logprobs", alts}};
}

json Logprobs::result() const {
  if (chat_) return {{"content", chat_content_}};
  return {{"tokens", tokens_}, {"token_logprobs", token_logprobs_}, {"top_logprobs", top_}, {"text_offset", offsets_}};
}

json tool_calls_json(const std::vector<ToolCall>& calls, bool stream) {
  json out = json::array();
  for (size_t i = 0; i < calls.size(); i++) {
    json c = {{"id", calls[i].id}, {"type", "function"}, {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (stream) c["index"] = i;
    out.push_back(std::move(c));
  }
  return out;
}

json whole_choice(const CompletionIds& ids, size_t index, const ReplyWhole& reply, bool parsed, const json& logprobs) {
  const StreamEvent& end = reply.end;
  json choice = {{"index", index}, {"finish_reason", finish_json(end.finish_reason)}, {"logprobs", logprobs}};
  if (!end.stop_string.empty()) choice["stop_reason"] = end.stop_string;
  if (!ids.chat) {
    choice["text"] = reply.text;
    return choice;
  }
  if (!parsed) {
    choice["message"] = {{"role", "assistant"}, {"content", reply.text}};
    return choice;
  }
  json message = {{"role", "assistant"}, {"content", reply.part.content}};
  if (!reply.part.reasoning.empty()) message["reasoning_content"] = reply.part.reasoning;
  if (!reply.part.calls.empty()) {
    // Only calls: no content; text around them is kept, trimmed.
    const std::optional<std::string> content = reply.content_beside_calls();
    message["content"] = content ? json(*content) : json(nullptr);
    message["tool_calls"] = tool_calls_json(reply.part.calls, false);
    if (end.finish_reason == "stop") choice["finish_reason"] = "tool_calls";
  }
  choice["message"] = std::move(message);
  return choice;
}

std::string whole_completion_body(const CompletionIds& ids, json choices, const ReplyUsage& usage) {
  json body = completion_envelope(ids, false, std::move(choices));
  body["usage"] = usage_json(usage);
  return json_text(body);
}

std::string sse_event(const json& j) { return "data: " + json_text(j) + "\n\n"; }

}  // namespace kestrel

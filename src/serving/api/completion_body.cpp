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

json usage_json(const std::vector<StreamEvent>& ends, int n) {
  // Each prompt is counted once (its n choices share it), completions summed.
  int64_t completion = 0, prompt = 0, cached = 0;
  for (size_t i = 0; i < ends.size(); i++) {
    completion += ends[i].completion_tokens;
    if (i % static_cast<size_t>(std::max(n, 1)) != 0) continue;
    prompt += ends[i].prompt_tokens;
    cached += ends[i].cached_tokens;
  }
  json u = {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
  u["prompt_tokens_details"] = {{"cached_tokens", cached}};
  return u;
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
    json alts = json::array();
    for (const auto& t : e.top) alts.push_back({{"token", name(t)}, {"logprob", t.logprob}, {"bytes", utf8_bytes(t.text)}});
    chat_content_.push_back({{"token", name(e.token)},
                             {"logprob", e.token.logprob},
                             {"bytes", utf8_bytes(e.token.text)},
                             {"top_logprobs", alts}});
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

json whole_choice(const CompletionIds& ids, size_t index, const std::string& text, const json& logprobs,
                  const StreamEvent& end) {
  json choice = {{"index", index}, {"finish_reason", finish_json(end.finish_reason)}, {"logprobs", logprobs}};
  if (!end.stop_string.empty()) choice["stop_reason"] = end.stop_string;
  if (ids.chat)
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  else
    choice["text"] = text;
  return choice;
}

json whole_chat_choice(size_t index, const ReplyPart& reply, const json& logprobs, const StreamEvent& end) {
  json choice = {{"index", index}, {"finish_reason", finish_json(end.finish_reason)}, {"logprobs", logprobs}};
  if (!end.stop_string.empty()) choice["stop_reason"] = end.stop_string;
  json message = {{"role", "assistant"}, {"content", reply.content}};
  if (!reply.reasoning.empty()) message["reasoning_content"] = reply.reasoning;
  if (!reply.calls.empty()) {
    // Only calls: no content; text around them is kept, trimmed.
    const size_t b = reply.content.find_first_not_of(" \n\r\t"), e = reply.content.find_last_not_of(" \n\r\t");
    message["content"] = b == std::string::npos ? json(nullptr) : json(reply.content.substr(b, e + 1 - b));
    message["tool_calls"] = tool_calls_json(reply.calls, false);
    if (end.finish_reason == "stop") choice["finish_reason"] = "tool_calls";
  }
  choice["message"] = std::move(message);
  return choice;
}

std::string whole_completion_body(const CompletionIds& ids, json choices, const std::vector<StreamEvent>& ends) {
  json body = completion_envelope(ids, false, std::move(choices));
  body["usage"] = usage_json(ends, ids.n);
  return json_text(body);
}

std::string sse_event(const json& j) { return "data: " + json_text(j) + "\n\n"; }

}  // namespace kestrel

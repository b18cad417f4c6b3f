#include "serving/api/anthropic_api.h"
#include "serving/api/media_input.h"

#include <fmt/format.h>

#include <optional>
#include <set>

#include "serving/api/completion_body.h"

namespace kestrel {

using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

namespace {

// Fields of an object other than `known` (and cache_control, read by read_breakpoints) are a 400 naming them.
void only_fields(const ojson& o, const std::string& where, const std::set<std::string>& known) {
  check_known_fields(o, where, known, {"cache_control"});
}

std::string text_of(const ojson& v, const std::string& param) {
  if (!v.is_string()) throw bad_request(param, fmt::format("'{}' must be a string", param));
  return v.get<std::string>();
}

// A string, or text blocks joined (system prompts, tool results).
std::string text_blocks(const ojson& v, const std::string& param) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) throw bad_request(param, fmt::format("'{}' must be a string or an array of text blocks", param));
  std::string out;
  for (size_t k = 0; k < v.size(); k++) {
    const std::string bp = fmt::format("{}[{}]", param, k);
    const ojson& b = v[k];
    if (!b.is_object() || !b.contains("type")) throw bad_request(bp, fmt::format("'{}' must be a content block", bp));
    if (b["type"] == "image" || b["type"] == "document")
      throw bad_request(bp, fmt::format("'{}' is {}: this server serves text models (text blocks only)", bp,
                                        b["type"] == "image" ? "an image" : "a document"));
    if (b["type"] != "text") throw bad_request(bp + ".type", fmt::format("'{}.type' must be \"text\" here", bp));
    only_fields(b, bp, {"type", "text", "citations"});
    out += text_of(b.value("text", ojson()), bp + ".text");
  }
  return out;
}

// One Anthropic message as OpenAI chat messages (a user turn's tool results become tool messages before its text).
void add_message(const ojson& m, size_t i, ojson& out) {
  const std::string mp = fmt::format("messages[{}]", i);
  if (!m.is_object()) throw bad_request(mp, fmt::format("'{}' must be an object", mp));
  only_fields(m, mp, {"role", "content"});
  if (!m.contains("role") || (m["role"] != "user" && m["role"] != "assistant"))
    throw bad_request(mp + ".role", fmt::format("'{}.role' must be \"user\" or \"assistant\"", mp));
  const bool user = m["role"] == "user";
  if (!m.contains("content")) throw bad_request(mp + ".content", fmt::format("'{}.content' is missing", mp));
  const ojson& c = m["content"];
  if (c.is_string()) {
    out.push_back({{"role", m["role"]}, {"content", c}});
    return;
  }
  const std::string cp = mp + ".content";
  if (!c.is_array()) throw bad_request(cp, fmt::format("'{}' must be a string or an array of content blocks", cp));
  std::string text, thinking;
  ojson calls = ojson::array();
  ojson parts = ojson::array();  // a user turn with images: its text and images in order, as OpenAI parts
  for (size_t k = 0; k < c.size(); k++) {
    const ojson& b = c[k];
    const std::string bp = fmt::format("{}[{}]", cp, k);
    if (!b.is_object() || !b.contains("type") || !b["type"].is_string())
      throw bad_request(bp, fmt::format("'{}' must be a content block with a type", bp));
    const std::string type = b["type"];
    if (type == "text") {
      only_fields(b, bp, {"type", "text", "citations"});
      text += text_of(b.value("text", ojson()), bp + ".text");
    } else if (type == "image" && user) {
      // A base64 image (the only source a server without network access can take), as an OpenAI image_url part.
      only_fields(b, bp, {"type", "source", "cache_control"});
      const std::string sp = bp + ".source";
      if (!b.contains("source") || !b["source"].is_object())
        throw bad_request(sp, fmt::format("'{}' must be {{\"type\": \"base64\", \"media_type\", \"data\"}}", sp));
      const ojson& src = b["source"];
      if (string_or_empty(src, "type") == "url") {  // fetched where the server allows it (image_url's rules)
        only_fields(src, sp, {"type", "url"});
        if (!text.empty()) parts.push_back({{"type", "text"}, {"text", text}});
        text.clear();
        parts.push_back({{"type", "image_url"}, {"image_url", {{"url", text_of(src.value("url", ojson()), sp + ".url")}}}});
        continue;
      }
      if (string_or_empty(src, "type") != "base64")
        throw bad_request(sp + ".type", fmt::format("'{}.type' must be \"base64\" or \"url\" (file sources are not "
                                                    "read here)",
                                                    sp));
      only_fields(src, sp, {"type", "media_type", "data"});
      const std::string media_type = text_of(src.value("media_type", ojson()), sp + ".media_type");
      if (media_type != "image/jpeg" && media_type != "image/png" && media_type != "image/gif" && media_type != "image/webp")
        throw bad_request(sp + ".media_type", fmt::format("'{}.media_type' must be image/jpeg, image/png, image/gif or "
                                                          "image/webp",
                                                          sp));
      if (!text.empty()) parts.push_back({{"type", "text"}, {"text", text}});
      text.clear();
      parts.push_back(image_url_part(media_type, text_of(src.value("data", ojson()), sp + ".data")));
    } else if (type == "image" || type == "document") {
      throw bad_request(bp, fmt::format("'{}' is {}: {}", bp, type == "image" ? "an image" : "a document",
                                        type == "image" ? "images go in user messages" : "documents are not read here"));
    } else if (type == "tool_use" && !user) {
      only_fields(b, bp, {"type", "id", "name", "input"});
      const std::string id = text_of(b.value("id", ojson()), bp + ".id");
      const std::string name = text_of(b.value("name", ojson()), bp + ".name");
      if (!b.contains("input") || !b["input"].is_object())
        throw bad_request(bp + ".input", fmt::format("'{}.input' must be an object", bp));
      calls.push_back({{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", b["input"].dump()}}}});
    } else if (type == "tool_result" && user) {
      only_fields(b, bp, {"type", "tool_use_id", "content", "is_error"});
      const std::string id = text_of(b.value("tool_use_id", ojson()), bp + ".tool_use_id");
      std::string result = b.contains("content") ? text_blocks(b["content"], bp + ".content") : "";
      if (b.contains("is_error") && !b["is_error"].is_boolean())
        throw bad_request(bp + ".is_error", fmt::format("'{}.is_error' must be true or false", bp));
      // The templates have no notion of a failed call: the result says so in words.
      if (b.value("is_error", false)) result = "Error: " + result;
      out.push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", result}});
    } else if (type == "thinking" && !user) {
      only_fields(b, bp, {"type", "thinking", "signature"});
      thinking += text_of(b.value("thinking", ojson()), bp + ".thinking");
    } else if (type == "redacted_thinking") {
      throw bad_request(bp,
                        fmt::format("'{}' is redacted thinking, which this server never writes and cannot read", bp));
    } else {
      throw bad_request(bp + ".type", fmt::format("'{}.type' \"{}\" is not a block a{} {} message takes here", bp, type,
                                                  user ? "" : "n", user ? "user" : "assistant"));
    }
  }
  if (user) {
    if (!parts.empty()) {
      if (!text.empty()) parts.push_back({{"type", "text"}, {"text", text}});
      out.push_back({{"role", "user"}, {"content", parts}});
      return;
    }
    if (!text.empty() || out.empty() || out.back()["role"] != "tool") out.push_back({{"role", "user"}, {"content", text}});
    return;
  }
  ojson a = {{"role", "assistant"}, {"content", calls.empty() || !text.empty() ? ojson(text) : ojson(nullptr)}};
  if (!thinking.empty()) a["reasoning_content"] = thinking;
  if (!calls.empty()) a["tool_calls"] = calls;
  out.push_back(std::move(a));
}

ojson tools_of(const ojson& tools) {
  if (!tools.is_array())
    throw bad_request("tools", "'tools' must be an array of {\"name\", \"description\", \"input_schema\"}");
  ojson out = ojson::array();
  for (size_t i = 0; i < tools.size(); i++) {
    const ojson& t = tools[i];
    const std::string tp = fmt::format("tools[{}]", i);
    if (!t.is_object()) throw bad_request(tp, fmt::format("'{}' must be an object", tp));
    if (t.contains("type") && t["type"] != "custom")
      throw bad_request(tp + ".type",
                        fmt::format("'{}.type' {} is a server tool Anthropic runs; only custom tools (name, "
                                    "description, input_schema) are served here",
                                    tp, t["type"].dump()));
    only_fields(t, tp, {"type", "name", "description", "input_schema"});
    ojson fn = {{"name", text_of(t.value("name", ojson()), tp + ".name")}};
    if (t.contains("description")) fn["description"] = text_of(t["description"], tp + ".description");
    if (!t.contains("input_schema") || !t["input_schema"].is_object())
      throw bad_request(tp + ".input_schema", fmt::format("'{}.input_schema' must be a JSON schema object", tp));
    fn["parameters"] = t["input_schema"];
    out.push_back({{"type", "function"}, {"function", fn}});
  }
  return out;
}

// tool_choice: auto, any (a call is required), tool (that one), none; disable_parallel_tool_use.
void tool_choice_of(const ojson& c, ojson& chat) {
  if (!c.is_object() || !c.contains("type") || !c["type"].is_string())
    throw bad_request("tool_choice", "'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}");
  const std::string type = c["type"];
  only_fields(c, "tool_choice", {"type", "name", "disable_parallel_tool_use"});
  if (type == "auto") {
    chat["tool_choice"] = "auto";
  } else if (type == "any") {
    chat["tool_choice"] = "required";
  } else if (type == "none") {
    chat["tool_choice"] = "none";
  } else if (type == "tool") {
    chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", text_of(c.value("name", ojson()), "tool_choice.name")}}}};
  } else {
    throw bad_request("tool_choice.type",
                      fmt::format("'tool_choice.type' \"{}\" is not auto, any, tool or none", type));
  }
  if (c.contains("disable_parallel_tool_use")) {
    if (!c["disable_parallel_tool_use"].is_boolean())
      throw bad_request("tool_choice.disable_parallel_tool_use",
                        "'tool_choice.disable_parallel_tool_use' must be true or false");
    chat["parallel_tool_calls"] = !c["disable_parallel_tool_use"].get<bool>();
  }
}

// thinking: {"type": "enabled", "budget_tokens"} or {"type": "disabled"}, through the template's switch.
void thinking_of(const ojson& t, const ChatTemplate& tmpl, CompletionAsk& ask) {
  const int64_t max_tokens = ask.max_tokens.value_or(0);
  ojson& chat = ask.chat_input;
  if (!t.is_object() || !t.contains("type") || (t["type"] != "enabled" && t["type"] != "disabled"))
    throw bad_request("thinking",
                      "'thinking' must be {\"type\": \"enabled\", \"budget_tokens\": N} or {\"type\": \"disabled\"}");
  const bool on = t["type"] == "enabled";
  only_fields(t, "thinking", on ? std::set<std::string>{"type", "budget_tokens"} : std::set<std::string>{"type"});
  if (on) {
    if (!t.contains("budget_tokens") || !t["budget_tokens"].is_number_integer() || t["budget_tokens"].get<int64_t>() < 1024)
      throw bad_request("thinking.budget_tokens", "'thinking.budget_tokens' must be an integer of at least 1024");
    if (max_tokens > 0 && t["budget_tokens"].get<int64_t>() >= max_tokens)
      throw bad_request("thinking.budget_tokens", "'thinking.budget_tokens' must be less than 'max_tokens'");
    if (max_tokens > 0) {  // the reasoning is closed there
      ask.reasoning_budget = t["budget_tokens"].get<int64_t>();
      ask.names.reasoning_budget = "thinking.budget_tokens";
    }
  }
  if (!tmpl.reasons()) {
    if (on) throw bad_request("thinking", "this model does not reason (its chat template writes no reasoning)");
    return;  // off is what it does anyway
  }
  // The switches chat templates read: Qwen3's and GLM's enable_thinking, DeepSeek-V3.1's thinking.
  for (const char* name : {"enable_thinking", "thinking"})
    if (tmpl.reads(name)) {
      chat["chat_template_kwargs"][name] = on;
      return;
    }
  if (!on)
    throw bad_request("thinking", "this model always reasons: its chat template has no switch to turn thinking off");
}

// A block's cache_control ({"type": "ephemeral", "ttl": "5m" | "1h"}): its time to live in seconds, or none.
std::optional<double> cache_ttl(const ojson& block, const std::string& where) {
  if (!block.is_object() || !block.contains("cache_control") || block["cache_control"].is_null()) return std::nullopt;
  const ojson& c = block["cache_control"];
  const std::string cp = where + ".cache_control";
  if (!c.is_object() || c.value("type", ojson()) != "ephemeral")
    throw bad_request(cp, fmt::format("'{}' must be {{\"type\": \"ephemeral\"}} (with \"ttl\" \"5m\" or \"1h\")", cp));
  only_fields(c, cp, {"type", "ttl"});
  if (!c.contains("ttl")) return 300.0;
  if (c["ttl"] == "5m") return 300.0;
  if (c["ttl"] == "1h") return 3600.0;
  throw bad_request(cp + ".ttl", fmt::format("'{}.ttl' must be \"5m\" or \"1h\"", cp));
}

// Where the request's cache_control breakpoints are, in the converted conversation: tools and system blocks mark
// the prefix before the first message (the system message, if any), a message's block the conversation through
// that message. At most 4, as Anthropic allows.
void read_breakpoints(const ojson& body, const std::vector<size_t>& converted, bool has_system, CompletionAsk& ask) {
  auto add = [&](const ojson& block, const std::string& where, size_t messages) {
    if (const auto ttl = cache_ttl(block, where)) {
      if (ask.cache_breakpoints.size() == 4)
        throw bad_request(where + ".cache_control", "at most 4 blocks may have 'cache_control'");
      ask.cache_breakpoints.push_back({messages, *ttl});
    }
  };
  const size_t before_messages = has_system ? 1 : 0;
  if (body.contains("tools") && body["tools"].is_array())
    for (size_t i = 0; i < body["tools"].size(); i++) add(body["tools"][i], fmt::format("tools[{}]", i), before_messages);
  if (body.contains("system") && body["system"].is_array())
    for (size_t i = 0; i < body["system"].size(); i++) add(body["system"][i], fmt::format("system[{}]", i), before_messages);
  const ojson& messages = body["messages"];
  for (size_t i = 0; i < messages.size(); i++) {
    const ojson& c = messages[i].value("content", ojson());
    if (!c.is_array()) continue;
    for (size_t k = 0; k < c.size(); k++) add(c[k], fmt::format("messages[{}].content[{}]", i, k), converted[i]);
  }
}

const char* error_type(int status) {
  switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503:
    case 529: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

std::string stop_reason_of(const StreamEvent& end, bool called) {
  if (end.finish_reason == "stop" && called) return "tool_use";
  if (end.finish_reason == "length") return "max_tokens";
  if (!end.stop_string.empty()) return "stop_sequence";
  return "end_turn";
}

std::string sse(const char* event, const json& data) {
  return fmt::format("event: {}\ndata: {}\n\n", event, json_text(data));
}

json tool_input(const std::string& arguments) {
  json input = json::parse(arguments, nullptr, false);
  return input.is_object() ? input : json::object();
}

}  // namespace

CompletionAsk anthropic_ask(const ojson& body, const ApiContext& ctx, bool count_only) {
  if (!body.is_object()) throw bad_request("", "the body must be a JSON object");
  std::set<std::string> known = {"model", "messages", "system", "tools", "tool_choice", "thinking"};
  if (!count_only)
    known.insert({"max_tokens", "stop_sequences", "stream", "temperature", "top_p", "top_k", "metadata"});
  only_fields(body, "", known);
  CompletionAsk ask;
  ask.chat = true;
  ask.model = checked_model_name(ctx, body);
  if (!count_only) {
    if (!body.contains("max_tokens"))
      throw bad_request("max_tokens", "'max_tokens' is missing (Anthropic's API requires it)");
    if (!body["max_tokens"].is_number_integer() || body["max_tokens"].get<int64_t>() < 1)
      throw bad_request("max_tokens", "'max_tokens' must be a positive integer");
    ask.max_tokens = body["max_tokens"].get<int64_t>();
  }
  ojson& chat = ask.chat_input;
  ojson messages = ojson::array();
  if (body.contains("system")) messages.push_back({{"role", "system"}, {"content", text_blocks(body["system"], "system")}});
  if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty())
    throw bad_request("messages", "'messages' must be a non-empty array of {\"role\", \"content\"}");
  std::vector<size_t> converted;  // per Anthropic message, the converted messages through it
  for (size_t i = 0; i < body["messages"].size(); i++) {
    add_message(body["messages"][i], i, messages);
    converted.push_back(messages.size());
  }
  chat["messages"] = std::move(messages);
  read_breakpoints(body, converted, body.contains("system"), ask);
  if (body.contains("tools")) chat["tools"] = tools_of(body["tools"]);
  if (body.contains("tool_choice")) tool_choice_of(body["tool_choice"], chat);
  if (body.contains("thinking")) thinking_of(body["thinking"], *ctx.chat_template, ask);
  if (count_only) return ask;
  if (body.contains("stop_sequences")) {
    if (!body["stop_sequences"].is_array()) throw bad_request("stop_sequences", "'stop_sequences' must be an array of strings");
    ask.stop = Fields(body).strings("stop_sequences", kMaxStops);
  }
  // Anthropic's range is 0 to 1.
  if (body.contains("temperature") &&
      (!body["temperature"].is_number() || body["temperature"].get<double>() < 0 || body["temperature"].get<double>() > 1))
    throw bad_request("temperature", "'temperature' must be a number from 0 to 1");
  read_sampling(Fields(body), ctx, "repetition_penalty", ask);  // temperature, top_p, top_k: the others are not fields here
  if (body.contains("metadata")) {  // who asked (metadata.user_id): nothing the answer depends on
    if (!body["metadata"].is_object()) throw bad_request("metadata", "'metadata' must be an object");
    only_fields(body["metadata"], "metadata", {"user_id"});
  }
  ask.stream = Fields(body).boolean("stream", false);
  return ask;
}

std::string anthropic_error_body(const ApiError& e) {
  std::string message = e.message;
  if (!e.param.empty() && message.find(e.param) == std::string::npos) message = e.param + ": " + message;
  return json_text({{"type", "error"}, {"error", {{"type", error_type(e.status)}, {"message", message}}}});
}

HttpResponse anthropic_error_response(const ApiError& e) { return json_response(anthropic_error_body(e), e.status); }

json AnthropicAnswer::message() const {
  const ReplyPart& reply = whole_.part;
  json content = json::array();
  if (!reply.reasoning.empty()) content.push_back({{"type", "thinking"}, {"thinking", reply.reasoning}, {"signature", ""}});
  const std::optional<std::string> text = whole_.content_beside_calls();
  if (text && !text->empty()) content.push_back({{"type", "text"}, {"text", *text}});
  for (const auto& c : reply.calls)
    content.push_back({{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", tool_input(c.arguments)}});
  const StreamEvent& end = whole_.end;
  const ReplyUsage u = usage();
  return {{"id", ids_.id},
          {"type", "message"},
          {"role", "assistant"},
          {"model", ids_.model},
          {"content", content},
          {"stop_reason", stop_reason_of(end, !reply.calls.empty())},
          {"stop_sequence", end.stop_string.empty() ? json(nullptr) : json(end.stop_string)},
          {"usage", input_usage(u)}};
}

// Anthropic's split of the prompt: read from the cache (the prefix cache's hit, whatever marked it), written to
// the cache (with cache_control: the marked prefix beyond what was read; without, nothing), and the rest.
json AnthropicAnswer::input_usage(const ReplyUsage& u) const {
  const int64_t creation = ids_.cache_breakpoint_tokens > u.cached ? ids_.cache_breakpoint_tokens - u.cached : 0;
  return {{"input_tokens", u.prompt - u.cached - creation},
          {"cache_read_input_tokens", u.cached},
          {"cache_creation_input_tokens", creation},
          {"output_tokens", u.completion}};
}

std::optional<HttpResponse> AnthropicAnswer::poll() {
  std::string unused;
  return whole(read(unused), [&] { return json_text(message()); }, anthropic_error_response);
}

void AnthropicAnswer::open_block(const char* type, std::string& out, const json& extra) {
  if (open_ == type && std::string(type) != "tool_use") return;
  close_block(out);
  json block = extra;
  block["type"] = type;
  open_ = type;
  index_++;
  out += sse("content_block_start", {{"type", "content_block_start"}, {"index", index_}, {"content_block", block}});
}

void AnthropicAnswer::close_block(std::string& out) {
  if (open_.empty()) return;
  if (open_ == "thinking")  // the SDKs expect a signature to close a thinking block; ours are not signed
    out += sse("content_block_delta",
               {{"type", "content_block_delta"}, {"index", index_}, {"delta", {{"type", "signature_delta"}, {"signature", ""}}}});
  out += sse("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
  open_.clear();
}

void AnthropicAnswer::on_error(std::string& out) {
  if (stream_) out += sse("error", {{"type", "error"}, {"error", {{"type", "api_error"}, {"message", error_}}}});
}

void AnthropicAnswer::on_event(const ReplyEvent& e, std::string& out) {
  whole_.add(e);
  if (!stream_) return;
  auto add = [&](const char* type, const char* delta_type, const char* field, const std::string& text) {
    if (text.empty()) return;
    open_block(type, out, {{field, ""}});
    out += sse("content_block_delta",
               {{"type", "content_block_delta"}, {"index", index_}, {"delta", {{"type", delta_type}, {field, text}}}});
  };
  add("thinking", "thinking_delta", "thinking", e.part.reasoning);
  add("text", "text_delta", "text", e.part.content);
  for (const auto& call : e.part.calls) {
    open_block("tool_use", out, {{"id", call.id}, {"name", call.name}, {"input", json::object()}});
    out += sse("content_block_delta",
               {{"type", "content_block_delta"},
                {"index", index_},
                {"delta", {{"type", "input_json_delta"}, {"partial_json", tool_input(call.arguments).dump()}}}});
  }
}

void AnthropicAnswer::on_done(std::string& out) {
  if (!stream_ || !error_.empty()) return;  // (streamed: the error event was the end)
  close_block(out);
  const StreamEvent& end = whole_.end;
  out += sse("message_delta",
             {{"type", "message_delta"},
              {"delta", {{"stop_reason", stop_reason_of(end, !whole_.part.calls.empty())},
                         {"stop_sequence", end.stop_string.empty() ? json(nullptr) : json(end.stop_string)}}},
              {"usage", input_usage(usage())}});
  out += sse("message_stop", {{"type", "message_stop"}});
}

StreamStep AnthropicAnswer::poll(std::string& out) {
  if (!started_) {
    started_ = true;
    const json message = {{"id", ids_.id},          {"type", "message"},          {"role", "assistant"},
                          {"model", ids_.model},    {"content", json::array()},   {"stop_reason", nullptr},
                          {"stop_sequence", nullptr},
                          {"usage", {{"input_tokens", ids_.input_tokens}, {"output_tokens", 0}}}};
    out += sse("message_start", {{"type", "message_start"}, {"message", message}});
    out += sse("ping", {{"type", "ping"}});
  }
  return read(out);
}

}  // namespace kestrel

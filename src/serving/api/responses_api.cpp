#include "serving/api/responses_api.h"

#include <fmt/format.h>

#include <set>
#include <utility>

#include "core/base64.h"
#include "serving/api/completion_body.h"

namespace kestrel {

using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

namespace {

std::string text_of(const ojson& v, const std::string& param) {
  if (!v.is_string()) throw bad_request(param, fmt::format("'{}' must be a string", param));
  return v.get<std::string>();
}

// A message's content: a string or parts of text (input_text, output_text), and (user turns) input_image parts
// as OpenAI image_url parts (the content is then those parts, else one string).
ojson content_of(const ojson& c, const std::string& param, bool images = false) {
  if (c.is_string()) return c;
  if (!c.is_array()) throw bad_request(param, fmt::format("'{}' must be a string or an array of content parts", param));
  std::string out;
  ojson parts = ojson::array();
  for (size_t k = 0; k < c.size(); k++) {
    const std::string pp = fmt::format("{}[{}]", param, k);
    const ojson& part = c[k];
    const std::string type = string_or_empty(part, "type");
    if (type == "input_text" || type == "output_text" || type == "text" || type == "summary_text" || type == "reasoning_text") {
      out += text_of(part.value("text", ojson()), pp + ".text");
    } else if (type == "input_image" && images) {
      check_known_fields(part, pp, {"type", "image_url", "detail"});
      if (!part.contains("image_url") || !part["image_url"].is_string())
        throw bad_request(pp + ".image_url", fmt::format("'{}.image_url' must be a data: URI or base64 (file_id images "
                                                         "are not stored here)",
                                                         pp));
      if (!out.empty()) parts.push_back({{"type", "text"}, {"text", out}});
      out.clear();
      ojson url = {{"url", part["image_url"]}};
      if (part.contains("detail")) url["detail"] = part["detail"];
      parts.push_back({{"type", "image_url"}, {"image_url", url}});
    } else if (type == "input_image" || type == "input_file" || type == "input_audio") {
      throw bad_request(pp, fmt::format("'{}' is {}: {}", pp, type,
                                        type == "input_image" ? "images go in user messages" : "only text and images are read"));
    } else if (type == "refusal") {
      out += text_of(part.value("refusal", ojson()), pp + ".refusal");
    } else {
      throw bad_request(pp + ".type", fmt::format("'{}.type' must be input_text or output_text", pp));
    }
  }
  if (parts.empty()) return out;
  if (!out.empty()) parts.push_back({{"type", "text"}, {"text", out}});
  return parts;
}
std::string content_text(const ojson& c, const std::string& param) { return content_of(c, param).get<std::string>(); }

// Input items as chat messages: an assistant turn gathers the reasoning, text and calls that follow each other.
ojson input_messages(const ojson& input) {
  ojson out = ojson::array();
  if (input.is_string()) {
    out.push_back({{"role", "user"}, {"content", input}});
    return out;
  }
  if (!input.is_array() || input.empty())
    throw bad_request("input", "'input' must be a string or a non-empty array of items");
  std::string reasoning;  // a reasoning item waits for the assistant turn it belongs to
  auto assistant = [&]() -> ojson& {
    if (out.empty() || out.back()["role"] != "assistant") {
      out.push_back({{"role", "assistant"}, {"content", nullptr}});
    }
    ojson& a = out.back();
    if (!reasoning.empty()) {
      a["reasoning_content"] = a.value("reasoning_content", std::string()) + reasoning;
      reasoning.clear();
    }
    return a;
  };
  for (size_t i = 0; i < input.size(); i++) {
    const ojson& it = input[i];
    const std::string ip = fmt::format("input[{}]", i);
    if (!it.is_object()) throw bad_request(ip, fmt::format("'{}' must be an object", ip));
    const std::string type = it.value("type", it.contains("role") ? "message" : "");
    if (type == "message") {
      const std::string role = text_of(it.value("role", ojson()), ip + ".role");
      if (role != "user" && role != "system" && role != "developer" && role != "assistant")
        throw bad_request(ip + ".role", fmt::format("'{}.role' must be user, system, developer or assistant", ip));
      if (role == "assistant") {
        const std::string text = content_text(it.value("content", ojson()), ip + ".content");
        ojson& a = assistant();
        a["content"] = (a["content"].is_string() ? a["content"].get<std::string>() : "") + text;
      } else {
        out.push_back({{"role", role == "developer" ? "system" : role},
                       {"content", content_of(it.value("content", ojson()), ip + ".content", role == "user")}});
      }
    } else if (type == "function_call") {
      ojson& a = assistant();
      if (!a.contains("tool_calls")) a["tool_calls"] = ojson::array();
      a["tool_calls"].push_back({{"id", text_of(it.value("call_id", ojson()), ip + ".call_id")},
                                 {"type", "function"},
                                 {"function",
                                  {{"name", text_of(it.value("name", ojson()), ip + ".name")},
                                   {"arguments", text_of(it.value("arguments", ojson()), ip + ".arguments")}}}});
    } else if (type == "function_call_output") {
      const ojson& o = it.value("output", ojson());
      out.push_back({{"role", "tool"},
                     {"tool_call_id", text_of(it.value("call_id", ojson()), ip + ".call_id")},
                     {"content", content_text(o, ip + ".output")}});
    } else if (type == "reasoning") {
      // Our reasoning items carry their text (content, or the encrypted_content we wrote: base64 of it).
      if (it.contains("content") && it["content"].is_array()) {
        reasoning += content_text(it["content"], ip + ".content");
      } else if (it.contains("encrypted_content") && it["encrypted_content"].is_string()) {
        const auto text = base64_decode(it["encrypted_content"].get<std::string>());
        if (!text)
          throw bad_request(ip + ".encrypted_content",
                            fmt::format("'{}.encrypted_content' is not one this server wrote", ip));
        reasoning += *text;
      }
    } else {
      throw bad_request(ip + ".type", fmt::format("'{}.type' \"{}\" is not an input item this server reads (message, "
                                                  "function_call, function_call_output, reasoning)",
                                                  ip, type));
    }
  }
  return out;
}

ojson responses_tools_of(const ojson& tools) {
  if (!tools.is_array()) throw bad_request("tools", "'tools' must be an array of function tools");
  ojson out = ojson::array();
  for (size_t i = 0; i < tools.size(); i++) {
    const ojson& t = tools[i];
    const std::string tp = fmt::format("tools[{}]", i);
    if (!t.is_object() || string_or_empty(t, "type") != "function")
      throw bad_request(tp + ".type",
                        fmt::format("'{}.type' must be \"function\" (built-in tools such as web_search run at "
                                    "OpenAI, not here)",
                                    tp));
    ojson fn = ojson::object();
    for (const auto& [key, value] : t.items()) {
      if (key == "type") continue;
      if (key != "name" && key != "description" && key != "parameters" && key != "strict")
        throw bad_request(tp + "." + key, fmt::format("unknown field '{}.{}'", tp, key));
      if (!value.is_null()) fn[key] = value;
    }
    out.push_back({{"type", "function"}, {"function", fn}});
  }
  return out;
}

// The part of a response a client sees again in the response object.
const std::set<std::string> kEchoed = {"model", "instructions", "tools", "tool_choice", "text", "reasoning",
                                       "max_output_tokens", "temperature", "top_p", "parallel_tool_calls",
                                       "previous_response_id", "store", "metadata", "truncation", "user", "top_logprobs"};

}  // namespace

void ResponseStore::put(const std::string& id, Entry e) {
  std::lock_guard lock(mutex_);
  if (capacity_ == 0) return;
  if (entries_.emplace(id, std::move(e)).second) order_.push_back(id);
  while (order_.size() > capacity_) {
    entries_.erase(order_.front());
    order_.pop_front();
  }
}

std::optional<ResponseStore::Entry> ResponseStore::get(const std::string& id) const {
  std::lock_guard lock(mutex_);
  const auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

ResponsesRequest responses_ask(const ojson& body, const ResponseStore& store, const ApiContext& ctx) {
  if (!body.is_object()) throw bad_request("", "the body must be a JSON object");
  static const std::set<std::string> known = {
      "model",      "input",       "instructions", "tools",    "tool_choice", "text",         "reasoning",
      "max_output_tokens", "temperature", "top_p",  "stream",  "store",       "previous_response_id", "metadata",
      "parallel_tool_calls", "truncation", "user", "include", "top_logprobs", "prompt_cache_key", "service_tier",
      "safety_identifier", "stream_options"};
  check_known_fields(body, "", known);
  const ChatTemplate& tmpl = *ctx.chat_template;
  ResponsesRequest r;
  CompletionAsk& a = r.ask;
  a.chat = true;
  a.model = checked_model_name(ctx, body);
  ojson& chat = a.chat_input;
  if (!body.contains("input")) throw bad_request("input", "'input' is missing");
  ojson conversation = ojson::array();
  if (body.contains("previous_response_id") && !body["previous_response_id"].is_null()) {
    const std::string prev = text_of(body["previous_response_id"], "previous_response_id");
    const auto entry = store.get(prev);
    if (!entry)
      throw ApiError{404,
                     fmt::format("no response '{}' is kept here (never stored, stored with store: false, or evicted: "
                                 "the last {} are kept)",
                                 prev, store.capacity()),
                     "previous_response_id", "invalid_request_error", "not_found"};
    conversation = entry->conversation;
  }
  for (auto& m : input_messages(body["input"])) conversation.push_back(std::move(m));
  r.conversation = conversation;
  ojson messages = ojson::array();
  if (body.contains("instructions") && !body["instructions"].is_null())
    messages.push_back({{"role", "system"}, {"content", text_of(body["instructions"], "instructions")}});
  for (const auto& m : conversation) messages.push_back(m);
  chat["messages"] = std::move(messages);
  if (body.contains("tools") && !body["tools"].is_null()) chat["tools"] = responses_tools_of(body["tools"]);
  if (body.contains("tool_choice") && !body["tool_choice"].is_null()) {
    const ojson& c = body["tool_choice"];
    if (c.is_object() && string_or_empty(c, "type") == "function" && c.contains("name"))
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", c["name"]}}}};
    else
      chat["tool_choice"] = c;  // auto, none, required: the chat parser checks
  }
  if (body.contains("parallel_tool_calls")) chat["parallel_tool_calls"] = body["parallel_tool_calls"];
  if (body.contains("text") && !body["text"].is_null()) {
    const ojson& t = body["text"];
    if (!t.is_object()) throw bad_request("text", "'text' must be an object");
    for (const auto& [key, value] : t.items())
      if (key != "format" && key != "verbosity")
        throw bad_request("text." + key, fmt::format("unknown field 'text.{}'", key));
    if (t.contains("verbosity") && !t["verbosity"].is_null() && t["verbosity"] != "medium")
      throw bad_request("text.verbosity",
                        "'text.verbosity' other than \"medium\" is not supported (no model here reads it)");
    if (t.contains("format") && t["format"].is_object()) {
      const ojson& f = t["format"];
      const std::string type = string_or_empty(f, "type");
      if (type == "json_schema") {
        ojson js = {{"name", f.value("name", "response")}};
        if (f.contains("schema")) js["schema"] = f["schema"];
        if (f.contains("strict")) js["strict"] = f["strict"];
        a.structured["response_format"] = {{"type", "json_schema"}, {"json_schema", js}};
      } else if (type == "json_object") {
        a.structured["response_format"] = {{"type", "json_object"}};
      } else if (type != "text") {
        throw bad_request("text.format.type", "'text.format.type' must be text, json_object or json_schema");
      }
    }
  }
  if (body.contains("reasoning") && !body["reasoning"].is_null()) {
    const ojson& re = body["reasoning"];
    std::string effort;
    if (!re.is_object()) throw bad_request("reasoning", "'reasoning' must be an object");
    for (const auto& [key, value] : re.items()) {
      if (value.is_null()) continue;
      if (key == "effort") {
        effort = text_of(value, "reasoning.effort");
      } else if (key == "summary" || key == "generate_summary") {
        // "auto" lets the server choose: reasoning comes whole (its content), with an empty summary.
        if (value != "auto")
          throw bad_request("reasoning." + key,
                            fmt::format("'reasoning.{}' {} is not supported: reasoning is returned whole, not "
                                        "summarised (\"auto\" accepted)",
                                        key, value.dump()));
      } else {
        throw bad_request("reasoning." + key, fmt::format("unknown field 'reasoning.{}'", key));
      }
    }
    // A template that reads an effort gets it; one with only a thinking switch has it off for "none" or
    // "minimal" and on otherwise.
    if (!effort.empty()) {
      if (tmpl.reads("reasoning_effort")) {
        chat["reasoning_effort"] = effort;
      } else if (const char* sw = tmpl.reads("enable_thinking") ? "enable_thinking" : tmpl.reads("thinking") ? "thinking" : nullptr) {
        chat["chat_template_kwargs"][sw] = effort != "none" && effort != "minimal";
      } else {
        throw bad_request("reasoning.effort",
                          "this model's chat template reads no reasoning effort and has no thinking switch");
      }
    }
  }
  const Fields f(body);
  a.max_tokens = f.integer("max_output_tokens", 1, int64_t{1} << 30);
  a.names.max_tokens = "max_output_tokens";
  a.names.prompt = "input";
  read_sampling(f, ctx, "repetition_penalty", a);  // temperature and top_p: the others are not fields here
  if (body.contains("truncation") && !body["truncation"].is_null() && body["truncation"] != "disabled")
    throw bad_request("truncation",
                      "'truncation' \"auto\" is not supported: a conversation longer than the context is refused");
  if (body.contains("include") && !body["include"].is_null()) {
    if (!body["include"].is_array()) throw bad_request("include", "'include' must be an array");
    for (const auto& inc : body["include"]) {
      if (inc == "message.output_text.logprobs")
        r.logprobs = true;
      else if (inc != "reasoning.encrypted_content")  // always written
        throw bad_request("include", fmt::format("'include' {} is not supported", inc.dump()));
    }
  }
  if (r.logprobs) {
    a.top_logprobs = static_cast<int>(f.integer("top_logprobs", 0, 20, 0));
  } else if (body.contains("top_logprobs") && !body["top_logprobs"].is_null()) {
    throw bad_request("top_logprobs", "'top_logprobs' needs include: [\"message.output_text.logprobs\"]");
  }
  if (body.contains("stream") && !body["stream"].is_null()) {
    if (!body["stream"].is_boolean()) throw bad_request("stream", "'stream' must be true or false");
    a.stream = body["stream"];
  }
  if (body.contains("store") && !body["store"].is_null()) {
    if (!body["store"].is_boolean()) throw bad_request("store", "'store' must be true or false");
    r.store = body["store"];
  }
  r.echo = json::object();
  for (const auto& [key, value] : body.items())
    if (kEchoed.count(key)) r.echo[key] = json::parse(value.dump());
  return r;
}

void ResponsesAnswer::event(const char* type, json data, std::string& out) {
  data["type"] = type;
  data["sequence_number"] = sequence_++;
  if (stream_) out += fmt::format("event: {}\ndata: {}\n\n", type, json_text(data));
}

json ResponsesAnswer::response(const char* status) const {
  json r = {{"id", ids_.id},
            {"object", "response"},
            {"created_at", ids_.created_at},
            {"status", status},
            {"error", nullptr},
            {"incomplete_details", nullptr},
            {"model", ids_.model},
            {"output", output_},
            {"parallel_tool_calls", true},
            {"previous_response_id", nullptr},
            {"instructions", nullptr},
            {"max_output_tokens", nullptr},
            {"reasoning", {{"effort", nullptr}, {"summary", nullptr}}},
            {"store", ids_.store},
            {"temperature", 1.0},
            {"top_p", 1.0},
            {"text", {{"format", {{"type", "text"}}}}},
            {"tool_choice", "auto"},
            {"tools", json::array()},
            {"truncation", "disabled"},
            {"metadata", json::object()},
            {"user", nullptr}};
  for (const auto& [key, value] : ids_.echo.items())
    if (key != "model") r[key] = value;
  if (std::string(status) == "incomplete") r["incomplete_details"] = {{"reason", "max_output_tokens"}};
  if (!error_.empty()) r["error"] = {{"code", "server_error"}, {"message", error_}};
  if (std::string(status) != "in_progress") {
    const ReplyUsage u = usage();
    r["usage"] = {{"input_tokens", u.prompt},
                  {"input_tokens_details", {{"cached_tokens", u.cached}}},
                  {"output_tokens", u.completion},
                  {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens_}}},
                  {"total_tokens", u.prompt + u.completion}};
  }
  return r;
}

void ResponsesAnswer::open_item(const std::string& kind, std::string& out, const json& call) {
  if (kind == item_kind_ && kind != "function_call") return;
  close_item(out);
  const int n = items_++;
  item_kind_ = kind;
  text_.clear();
  const std::string suffix = fmt::format("{}_{}", ids_.id.substr(5), n);
  if (kind == "reasoning") {
    item_ = {{"type", "reasoning"}, {"id", "rs_" + suffix}, {"summary", json::array()}};
  } else if (kind == "message") {
    item_ = {{"type", "message"}, {"id", "msg_" + suffix}, {"status", "in_progress"}, {"role", "assistant"},
             {"content", json::array()}};
  } else {
    item_ = {{"type", "function_call"}, {"id", "fc_" + suffix}, {"call_id", call["id"]},
             {"name", call["function"]["name"]}, {"arguments", ""}, {"status", "in_progress"}};
  }
  const auto index = output_.size();
  event("response.output_item.added", {{"output_index", index}, {"item", item_}}, out);
  if (kind == "message")
    event("response.content_part.added",
          {{"item_id", item_["id"]}, {"output_index", index}, {"content_index", 0},
           {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}}},
          out);
  if (kind == "reasoning")
    event("response.content_part.added",
          {{"item_id", item_["id"]}, {"output_index", index}, {"content_index", 0},
           {"part", {{"type", "reasoning_text"}, {"text", ""}}}},
          out);
}

void ResponsesAnswer::close_item(std::string& out) {
  if (item_kind_.empty()) return;
  const auto index = output_.size();
  const json id = item_["id"];
  if (item_kind_ == "reasoning") {
    event("response.reasoning_text.done", {{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"text", text_}}, out);
    event("response.content_part.done",
          {{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"part", {{"type", "reasoning_text"}, {"text", text_}}}},
          out);
    item_["content"] = json::array({{{"type", "reasoning_text"}, {"text", text_}}});
    item_["encrypted_content"] = base64_encode(text_);  // (not encrypted: what a client without the content sends back)
    if (ids_.count_tokens) reasoning_tokens_ += ids_.count_tokens(text_);
  } else if (item_kind_ == "message") {
    json part = {{"type", "output_text"}, {"text", text_}, {"annotations", json::array()}};
    if (ids_.logprobs) part["logprobs"] = logprobs_;
    event("response.output_text.done",
          {{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"text", text_}, {"logprobs", logprobs_}}, out);
    event("response.content_part.done", {{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"part", part}}, out);
    item_["content"] = json::array({part});
    item_["status"] = "completed";
    logprobs_ = json::array();
  } else {
    event("response.function_call_arguments.done",
          {{"item_id", id}, {"output_index", index}, {"name", item_["name"]}, {"arguments", text_}}, out);
    item_["arguments"] = text_;
    item_["status"] = "completed";
  }
  event("response.output_item.done", {{"output_index", index}, {"item", item_}}, out);
  output_.push_back(item_);
  item_ = nullptr;
  item_kind_.clear();
  text_.clear();
}

void ResponsesAnswer::on_event(const ReplyEvent& e, std::string& out) {
  auto index = [&] { return output_.size(); };
  if (ids_.logprobs && e.engine.has_token)  // entries in the chat shape, as output_text.logprobs carries them
    pending_logprobs_.push_back(Logprobs(true).chat_entry(e.engine));
  if (!e.part.reasoning.empty()) {
    if (e.part.content.empty()) pending_logprobs_ = json::array();  // the reasoning's tokens, not the message's
    open_item("reasoning", out);
    text_ += e.part.reasoning;
    event("response.reasoning_text.delta",
          {{"item_id", item_["id"]}, {"output_index", index()}, {"content_index", 0}, {"delta", e.part.reasoning}}, out);
  }
  std::string d = e.part.content;
  // Whitespace alone does not start a message (around a call it is the template's layout); it waits.
  if (item_kind_ != "message" && d.find_first_not_of(" \n\r\t") == std::string::npos) {
    pending_ws_ += d;
    d.clear();
  }
  if (!d.empty()) {
    open_item("message", out);
    d = std::exchange(pending_ws_, {}) + d;
    text_ += d;
    const json lp = std::exchange(pending_logprobs_, json::array());
    for (const auto& entry : lp) logprobs_.push_back(entry);
    event("response.output_text.delta",
          {{"item_id", item_["id"]}, {"output_index", index()}, {"content_index", 0}, {"delta", d}, {"logprobs", lp}}, out);
  }
  for (const auto& call : e.part.calls) {
    pending_logprobs_ = json::array();
    open_item("function_call", out,
              {{"id", call.id}, {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
    text_ = call.arguments;
    event("response.function_call_arguments.delta", {{"item_id", item_["id"]}, {"output_index", index()}, {"delta", text_}}, out);
  }
  if (e.end()) finish_reason_ = e.engine.finish_reason;
}

void ResponsesAnswer::on_done(std::string& out) {
  if (item_kind_ == "message")  // tokens held back to the end belong to the message they ended
    for (auto& entry : std::exchange(pending_logprobs_, json::array())) logprobs_.push_back(std::move(entry));
  close_item(out);
  const char* status = !error_.empty() ? "failed" : finish_reason_ == "length" ? "incomplete" : "completed";
  const json r = response(status);
  event(error_.empty() ? (finish_reason_ == "length" ? "response.incomplete" : "response.completed") : "response.failed",
        {{"response", r}}, out);
  if (ids_.store && error_.empty()) {
    // The conversation a later request continues: this one's, then its answer as an assistant turn.
    ojson conversation = ids_.conversation;
    ojson turn = {{"role", "assistant"}, {"content", nullptr}};
    for (const auto& item : output_) {
      if (item["type"] == "reasoning") turn["reasoning_content"] = item["content"][0]["text"];
      if (item["type"] == "message") turn["content"] = item["content"][0]["text"];
      if (item["type"] == "function_call") {
        if (!turn.contains("tool_calls")) turn["tool_calls"] = ojson::array();
        turn["tool_calls"].push_back({{"id", item["call_id"]},
                                      {"type", "function"},
                                      {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}});
      }
    }
    if (turn["content"].is_null() && !turn.contains("tool_calls")) turn["content"] = "";  // (reasoning alone)
    conversation.push_back(std::move(turn));
    store_.put(ids_.id, {std::move(conversation), r});
  }
}

StreamStep ResponsesAnswer::step(std::string& out) {
  if (!started_) {
    started_ = true;
    event("response.created", {{"response", response("in_progress")}}, out);
    event("response.in_progress", {{"response", response("in_progress")}}, out);
  }
  return read(out);
}

StreamStep ResponsesAnswer::poll(std::string& out) { return step(out); }

std::optional<HttpResponse> ResponsesAnswer::poll() {
  std::string unused;
  return whole(step(unused), [&] { return json_text(response(finish_reason_ == "length" ? "incomplete" : "completed")); },
               error_response);
}

}  // namespace kestrel

#include "serving/api/ollama_api.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <map>
#include <set>
#include <utility>

#include "serving/api/completion_body.h"

namespace kestrel {

using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

namespace {

void no_images(const ojson& o, const std::string& where) {
  if (o.contains("images") && !o["images"].is_null() && !(o["images"].is_array() && o["images"].empty()))
    throw bad_request(where + "images", fmt::format("'{}images': this server has no image encoder (start it with "
                                                    "--mmproj FILE)",
                                                    where));
}

// Ollama's `images` (base64 files) beside a text: the images first, then the text, as OpenAI parts; the text
// alone when there are none.
ojson with_images(const ojson& o, const std::string& where, const ojson& text, const ApiContext& ctx) {
  if (!o.contains("images") || o["images"].is_null() || (o["images"].is_array() && o["images"].empty())) return text;
  if (!ctx.media) no_images(o, where);
  const ojson& images = o["images"];
  if (!images.is_array()) throw bad_request(where + "images", fmt::format("'{}images' must be an array of base64 strings", where));
  ojson parts = ojson::array();
  for (size_t k = 0; k < images.size(); k++) {
    if (!images[k].is_string())
      throw bad_request(fmt::format("{}images[{}]", where, k), fmt::format("'{}images[{}]' must be a base64 string", where, k));
    parts.push_back({{"type", "image_url"}, {"image_url", {{"url", images[k]}}}});
  }
  if (text.is_string() && !text.get<std::string>().empty()) parts.push_back({{"type", "text"}, {"text", text}});
  return parts;
}

// Ollama's options: sampling (with OpenAI's ranges, named options.*), num_predict, num_ctx, stop.
void options_of(const ojson& o, const ApiContext& ctx, CompletionAsk& ask, int64_t& num_ctx) {
  if (!o.is_object()) throw bad_request("options", "'options' must be an object");
  // Where the model runs, not what it computes.
  static const std::set<std::string> placement = {"numa",     "num_batch", "num_gpu",    "main_gpu", "low_vram",
                                                  "f16_kv",   "use_mmap",  "use_mlock",  "num_thread", "vocab_only",
                                                  "num_keep", "logits_all", "embedding_only"};
  static const std::set<std::string> sampling = {"temperature",      "top_p",             "top_k",
                                                 "min_p",            "seed",              "presence_penalty",
                                                 "frequency_penalty", "repeat_last_n",    "repeat_penalty"};
  // Sampling Kestrel does not implement, with the value that leaves it out.
  static const std::map<std::string, double> neutral = {{"tfs_z", 1.0}, {"typical_p", 1.0}, {"mirostat", 0.0}};
  const Fields f(o, "options.");
  for (const auto& [key, v] : o.items()) {
    const std::string param = "options." + key;
    if (v.is_null() || placement.count(key) || sampling.count(key)) continue;
    if (key == "num_predict") {
      if (!v.is_number_integer()) throw bad_request(param, "'options.num_predict' must be an integer");
      if (v.get<int64_t>() < -2) throw bad_request(param, "'options.num_predict' must be -2, -1 or a count of tokens");
      // -1: no limit, -2: fill the context — both up to the context here.
      if (v.get<int64_t>() >= 0) ask.max_tokens = v.get<int64_t>();
      ask.names.max_tokens = param;
    } else if (key == "num_ctx") {
      if (!v.is_number_integer() || v.get<int64_t>() < 1)
        throw bad_request(param, "'options.num_ctx' must be a positive integer");
      num_ctx = v.get<int64_t>();
    } else if (key == "stop") {
      if (!v.is_array()) throw bad_request(param, "'options.stop' must be an array of strings");
      ask.stop = f.strings("stop", kMaxStops);
    } else if (neutral.count(key)) {
      if (!v.is_number() || v.get<double>() != neutral.at(key))
        throw bad_request(param, fmt::format("'{}' is not supported by this server (only {}, which leaves it out)",
                                             param, neutral.at(key)));
    } else if (key == "mirostat_tau" || key == "mirostat_eta" || key == "penalize_newline") {
      continue;  // read by mirostat / a newline penalty only, which are refused above when asked for
    } else {
      throw bad_request(param, fmt::format("unknown option '{}'", key));
    }
  }
  read_sampling(f, ctx, "repeat_penalty", ask);
}

// format: "json" or a schema, held by the grammar (as OpenAI's response_format, which the grammar is made from).
void format_of(const ojson& f, ojson& structured) {
  if (f.is_string() && f == "json") {
    structured["response_format"] = {{"type", "json_object"}};
  } else if (f.is_object()) {
    structured["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "format"}, {"schema", f}}}};
  } else if (!(f.is_string() && f.get<std::string>().empty())) {
    throw bad_request("format", "'format' must be \"json\" or a JSON schema object");
  }
}

// think: true/false through the template's switch; "low"/"medium"/"high" as reasoning_effort (template inputs).
void think_of(const ojson& t, const ChatTemplate& tmpl, ojson& out) {
  if (t.is_string()) {
    const std::string effort = t;
    if (effort != "low" && effort != "medium" && effort != "high")
      throw bad_request("think", "'think' must be true, false, \"low\", \"medium\" or \"high\"");
    out["reasoning_effort"] = effort;  // checked against the template by the chat parser
    return;
  }
  if (!t.is_boolean()) throw bad_request("think", "'think' must be true, false, \"low\", \"medium\" or \"high\"");
  const bool on = t;
  if (!tmpl.reasons()) {
    if (on) throw bad_request("think", "this model does not think (its chat template writes no reasoning)");
    return;
  }
  for (const char* name : {"enable_thinking", "thinking"})
    if (tmpl.reads(name)) {
      out["chat_template_kwargs"][name] = on;
      return;
    }
  if (!on) throw bad_request("think", "this model always thinks: its chat template has no switch to turn thinking off");
}

ojson messages_of(const ojson& msgs, const ApiContext& ctx) {
  if (!msgs.is_array() || msgs.empty()) throw bad_request("messages", "'messages' must be a non-empty array");
  ojson out = ojson::array();
  int call_no = 0;
  std::vector<std::string> open_calls;  // ids of the last assistant turn's calls, for the tool turns after it
  for (size_t i = 0; i < msgs.size(); i++) {
    const ojson& m = msgs[i];
    const std::string mp = fmt::format("messages[{}]", i);
    if (!m.is_object()) throw bad_request(mp, fmt::format("'{}' must be an object", mp));
    check_known_fields(m, mp, {"role", "content", "thinking", "images", "tool_calls", "tool_name"});
    if (!m.contains("role") || !m["role"].is_string())
      throw bad_request(mp + ".role", fmt::format("'{}.role' must be a string", mp));
    if (m["role"] != "user") no_images(m, mp + ".");
    ojson n = {{"role", m["role"]}, {"content", with_images(m, mp + ".", m.value("content", std::string()), ctx)}};
    if (m.contains("thinking") && m["thinking"].is_string() && !m["thinking"].get<std::string>().empty())
      n["reasoning_content"] = m["thinking"];
    if (m.contains("tool_calls") && m["tool_calls"].is_array() && !m["tool_calls"].empty()) {
      ojson calls = ojson::array();
      open_calls.clear();
      for (size_t k = 0; k < m["tool_calls"].size(); k++) {
        const ojson& c = m["tool_calls"][k];
        const std::string cp = fmt::format("{}.tool_calls[{}]", mp, k);
        if (!c.is_object() || !c.contains("function") || !c["function"].is_object() || !c["function"].contains("name"))
          throw bad_request(cp, fmt::format("'{}' must be {{\"function\": {{\"name\", \"arguments\"}}}}", cp));
        const ojson& fn = c["function"];
        const std::string id = fmt::format("call_{}", call_no++);
        open_calls.push_back(id);
        calls.push_back({{"id", id},
                         {"type", "function"},
                         {"function", {{"name", fn["name"]}, {"arguments", fn.value("arguments", ojson::object()).dump()}}}});
      }
      n["tool_calls"] = calls;
      if (n["content"] == "") n["content"] = nullptr;
    }
    if (n["role"] == "tool" && !open_calls.empty()) {  // answers the earlier calls in order
      n["tool_call_id"] = open_calls.front();
      open_calls.erase(open_calls.begin());
    }
    out.push_back(std::move(n));
  }
  return out;
}

ojson tools_of(const ojson& tools) {
  if (!tools.is_array())
    throw bad_request("tools", "'tools' must be an array of {\"type\": \"function\", \"function\": {...}}");
  ojson out = ojson::array();
  for (const auto& t : tools) {
    ojson c = t;
    // Ollama's tools are OpenAI's; a function's own "type" key (some clients send one) is not.
    if (c.contains("function") && c["function"].is_object()) c["function"].erase("type");
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

OllamaRequest ollama_ask(const ojson& body, const ApiContext& ctx, bool generate) {
  if (!body.is_object()) throw bad_request("", "the body must be a JSON object");
  std::set<std::string> known = {"model", "stream", "format", "options", "keep_alive", "think", "logprobs", "top_logprobs"};
  if (generate)
    known.insert({"prompt", "system", "raw", "images", "suffix", "template", "context"});
  else
    known.insert({"messages", "tools"});
  check_known_fields(body, "", known);
  OllamaRequest r;
  CompletionAsk& a = r.ask;
  if (!body.contains("model") || !body["model"].is_string()) throw bad_request("model", "'model' is required");
  a.model = body["model"];
  const Fields f(body);
  a.stream = f.boolean("stream", true);  // Ollama's default
  if (generate) {
    if (body.contains("raw") && body["raw"] == true && body.contains("images") && body["images"].is_array() &&
        !body["images"].empty())
      throw bad_request("images", "'images' need the chat template (raw: false): a raw prompt has no place for them");
    if (body.contains("suffix") && body["suffix"].is_string() && !body["suffix"].get<std::string>().empty())
      throw bad_request("suffix", "'suffix' (fill-in-the-middle) is served by POST /infill, not /api/generate");
    if (body.contains("template") && body["template"].is_string() && !body["template"].get<std::string>().empty())
      throw bad_request("template",
                        "'template' (a Go template) is not supported: the model's own chat template renders");
    if (body.contains("context") && body["context"].is_array() && !body["context"].empty())
      throw bad_request("context", "'context' (the deprecated token context of an earlier answer) is not supported");
    if (!body.contains("prompt") || !body["prompt"].is_string())
      throw bad_request("prompt", "'prompt' must be a string");
    a.chat = !f.boolean("raw", false);
    if (a.chat) {
      ojson messages = ojson::array();
      if (body.contains("system") && body["system"].is_string()) messages.push_back({{"role", "system"}, {"content", body["system"]}});
      messages.push_back({{"role", "user"}, {"content", with_images(body, "", body["prompt"], ctx)}});
      a.chat_input["messages"] = messages;
      a.names.prompt = "prompt";
    } else {
      if (body.contains("system") && body["system"].is_string() && !body["system"].get<std::string>().empty())
        throw bad_request("system", "'system' needs the template (raw: false): a raw prompt is sent as it is");
      a.prompts = token_prompts(ctx, body, "prompt", 1, true);
    }
  } else {
    a.chat = true;
    if (!body.contains("messages")) throw bad_request("messages", "'messages' is required");
    a.chat_input["messages"] = messages_of(body["messages"], ctx);
    if (body.contains("tools") && !body["tools"].is_null()) a.chat_input["tools"] = tools_of(body["tools"]);
  }
  // Ollama's defaults where a model file sets none.
  a.sampling.temperature = 0.8f;
  a.sampling.top_k = 40;
  a.sampling.top_p = 0.9f;
  if (body.contains("options") && !body["options"].is_null()) options_of(body["options"], ctx, a, r.num_ctx);
  if (body.contains("format") && !body["format"].is_null()) format_of(body["format"], a.structured);
  if (body.contains("think") && !body["think"].is_null()) {
    if (!a.chat) throw bad_request("think", "'think' needs the template (raw: false)");
    think_of(body["think"], *ctx.chat_template, a.chat_input);
  }
  if (f.boolean("logprobs", false)) a.top_logprobs = static_cast<int>(f.integer("top_logprobs", 0, 20, 0));
  return r;
}

std::string ollama_model_name(const std::string& requested, const std::vector<std::string>& served) {
  for (const auto& s : served)
    if (requested == s || requested == s + ":latest") return s;
  return "";
}

HttpResponse ollama_error_response(const ApiError& e) {
  std::string message = e.message;
  if (!e.param.empty() && message.find(e.param) == std::string::npos) message = e.param + ": " + message;
  return json_response(json_text({{"error", message}}), e.status);
}

std::string ollama_time(std::chrono::system_clock::time_point t) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ns / 1000000000);
  return fmt::format("{:%Y-%m-%dT%H:%M:%S}.{:09d}Z", fmt::gmtime(secs), ns % 1000000000);
}

json OllamaAnswer::line(const std::string& content, const std::string& thinking, const json& calls,
                        const json& logprobs) const {
  json l = {{"model", ids_.model}, {"created_at", ollama_time(std::chrono::system_clock::now())}};
  if (ids_.generate) {
    l["response"] = content;
    if (!thinking.empty()) l["thinking"] = thinking;
  } else {
    json m = {{"role", "assistant"}, {"content", content}};
    if (!thinking.empty()) m["thinking"] = thinking;
    if (!calls.empty()) m["tool_calls"] = calls;
    l["message"] = m;
  }
  if (!logprobs.empty()) l["logprobs"] = logprobs;
  l["done"] = false;
  return l;
}

json OllamaAnswer::final_line() {
  using ns = std::chrono::nanoseconds;
  const auto now = std::chrono::steady_clock::now();
  const auto first = first_token_ == std::chrono::steady_clock::time_point{} ? now : first_token_;
  // Streamed, the last line carries only what no earlier line did (logprobs of tokens held back to the end).
  json l = stream_ ? line("", "", json::array(), std::exchange(logprobs_, json::array()))
                   : line(content_, thinking_, calls_, logprobs_);
  const ReplyUsage u = usage();
  l["done"] = true;
  l["done_reason"] = done_reason_;
  l["total_duration"] = std::chrono::duration_cast<ns>(now - ids_.arrival).count();
  l["load_duration"] = 0;  // loaded at start
  l["prompt_eval_count"] = u.prompt;
  l["prompt_eval_duration"] = std::chrono::duration_cast<ns>(first - ids_.arrival).count();
  l["eval_count"] = u.completion;
  l["eval_duration"] = std::chrono::duration_cast<ns>(now - first).count();
  if (ids_.generate) l["context"] = json::array();  // (the deprecated token context: not kept)
  return l;
}

void OllamaAnswer::on_error(std::string& out) {
  if (stream_) out += json_text({{"error", error_}}) + "\n";
}

void OllamaAnswer::on_event(const ReplyEvent& e, std::string& out) {
  const std::string& content = e.part.content;
  const std::string& thinking = e.part.reasoning;
  json calls = json::array();
  for (const auto& call : e.part.calls) {
    json args = json::parse(call.arguments, nullptr, false);
    calls.push_back({{"function", {{"name", call.name}, {"arguments", args.is_object() ? args : json::object()}}}});
  }
  if (ids_.logprobs && e.engine.has_token)  // Ollama's entries are the chat shape: token, logprob, bytes, top_logprobs
    logprobs_.push_back(Logprobs(true).chat_entry(e.engine));
  if (e.end()) done_reason_ = e.engine.finish_reason == "length" ? "length" : "stop";
  if (content.empty() && thinking.empty() && calls.empty()) return;  // (its logprobs go with the next line)
  if (first_token_ == std::chrono::steady_clock::time_point{}) first_token_ = std::chrono::steady_clock::now();
  if (stream_) {
    out += json_text(line(content, thinking, calls, std::exchange(logprobs_, json::array()))) + "\n";
    return;
  }
  content_ += content;
  thinking_ += thinking;
  for (auto& call : calls) calls_.push_back(call);
}

void OllamaAnswer::on_done(std::string& out) {
  if (stream_ && error_.empty()) out += json_text(final_line()) + "\n";
}

std::optional<HttpResponse> OllamaAnswer::poll() {
  std::string unused;
  return whole(read(unused), [&] { return json_text(final_line()); }, ollama_error_response);
}

}  // namespace kestrel

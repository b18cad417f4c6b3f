#include "chat/tool_calls.h"

#include "chat/harmony.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <random>

namespace kestrel {

using ojson = nlohmann::ordered_json;

namespace {

constexpr std::string_view kHermesOpen = "<tool_call>", kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kDsCallsBegin = "<｜tool▁calls▁begin｜>", kDsCallsEnd = "<｜tool▁calls▁end｜>",
                           kDsCallBegin = "<｜tool▁call▁begin｜>", kDsCallEnd = "<｜tool▁call▁end｜>",
                           kDsSep = "<｜tool▁sep｜>";
constexpr std::string_view kMistralCalls = "[TOOL_CALLS]", kMistralArgs = "[ARGS]";
constexpr std::string_view kGlmKey = "<arg_key>", kGlmKeyEnd = "</arg_key>", kGlmValue = "<arg_value>",
                           kGlmValueEnd = "</arg_value>";
constexpr std::string_view kQwenFunction = "<function=", kQwenFunctionEnd = "</function>",
                           kQwenParameter = "<parameter=", kQwenParameterEnd = "</parameter>";
constexpr std::string_view kGemmaCall = "<|tool_call>", kGemmaCallEnd = "<tool_call|>", kGemmaQuote = "<|\"|>";
constexpr std::string_view kDsml = "｜DSML｜", kDsmlFunctionCalls = "<｜DSML｜function_calls>",
                           kDsmlToolCalls = "<｜DSML｜tool_calls>", kDsmlInvoke = "<｜DSML｜invoke name=\"",
                           kDsmlInvokeEnd = "</｜DSML｜invoke>", kDsmlParameter = "<｜DSML｜parameter name=\"",
                           kDsmlParameterEnd = "</｜DSML｜parameter>";

std::string_view trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

std::string new_call_id(ToolCallFormat f) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char alnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id = f == ToolCallFormat::Mistral ? "" : "call_";
  for (int i = 0; i < (f == ToolCallFormat::Mistral ? 9 : 24); i++) id += alnum[rng() % (sizeof alnum - 1)];
  return id;
}

namespace {

// {"name": ..., "arguments"|"parameters": {...} or "..."} as a call, or nullopt.
std::optional<ToolCall> call_from_object(const ojson& j, ToolCallFormat f) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
  const char* key = j.contains("arguments") ? "arguments" : j.contains("parameters") ? "parameters" : nullptr;
  std::string args = "{}";
  if (key) {
    const ojson& a = j[key];
    if (a.is_string()) {
      args = a.get<std::string>();
    } else if (a.is_object()) {
      args = a.dump(-1, ' ', false, ojson::error_handler_t::replace);
    } else {
      return std::nullopt;
    }
  }
  return ToolCall{new_call_id(f), j["name"].get<std::string>(), std::move(args)};
}

std::optional<ojson> parse_json(std::string_view text) {
  ojson j = ojson::parse(text, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

// Text outside the calls: trimmed, nullopt when nothing is left.
std::optional<std::string> outside(std::string text) {
  const std::string_view t = trim(text);
  if (t.empty()) return std::nullopt;
  return std::string(t);
}

// Calls each between <tool_call> and </tool_call> (the last may be unclosed), read by `read` from what lies
// between; the text outside them is the content. A body `read` refuses leaves the whole reply content.
template <typename Read>
ToolCallReply tagged_calls(std::string_view text, Read read) {
  ToolCallReply r;
  std::string rest;
  size_t at = 0;
  for (;;) {
    const size_t open = text.find(kHermesOpen, at);
    if (open == std::string_view::npos) break;
    rest += text.substr(at, open - at);
    const size_t body = open + kHermesOpen.size(), close = text.find(kHermesClose, body);
    const std::optional<ToolCall> call =
        read(text.substr(body, close == std::string_view::npos ? std::string_view::npos : close - body));
    if (!call) return {std::string(text), {}};
    r.calls.push_back(*call);
    if (close == std::string_view::npos) {
      at = text.size();
      break;
    }
    at = close + kHermesClose.size();
  }
  rest += text.substr(std::min(at, text.size()));
  if (r.calls.empty()) return {std::string(text), {}};
  r.content = outside(std::move(rest));
  return r;
}

// Hermes / Qwen2.5 / Qwen3: a JSON object {"name", "arguments"} in each <tool_call>.
ToolCallReply hermes(std::string_view text) {
  return tagged_calls(text, [](std::string_view body) -> std::optional<ToolCall> {
    const auto j = parse_json(trim(body));
    return j ? call_from_object(*j, ToolCallFormat::Hermes) : std::nullopt;
  });
}

// One value between a Qwen <parameter=...> tag and its end: the template writes a newline on each side of it,
// objects and arrays as JSON, everything else through Jinja's `string` (booleans and null as Python writes
// them: True, False, None). Read back through JSON where it reads as JSON, those three words as what they
// stand for, anything else as the string.
ojson qwen_value(std::string_view v) {
  if (!v.empty() && v.front() == '\n') v.remove_prefix(1);
  if (!v.empty() && v.back() == '\n') v.remove_suffix(1);
  if (v == "True" || v == "False") return v == "True";
  if (v == "None") return nullptr;
  const auto j = parse_json(v);
  return j ? *j : ojson(std::string(v));
}

// The inside of one Qwen3-Coder / Qwen3.5 call: <function=NAME> then <parameter=KEY>VALUE</parameter> items,
// then </function>; nullopt when it is not one.
std::optional<ToolCall> qwen_call(std::string_view call) {
  const size_t f = call.find(kQwenFunction);
  if (f == std::string_view::npos || !trim(call.substr(0, f)).empty()) return std::nullopt;
  const size_t name_end = call.find('>', f);
  if (name_end == std::string_view::npos) return std::nullopt;
  const std::string_view name = call.substr(f + kQwenFunction.size(), name_end - f - kQwenFunction.size());
  if (name.empty() || name.find_first_of("<>{}\n ") != std::string_view::npos) return std::nullopt;
  ojson args = ojson::object();
  size_t p = name_end + 1;
  for (;;) {
    while (p < call.size() && (call[p] == '\n' || call[p] == ' ')) p++;
    if (call.substr(p, kQwenFunctionEnd.size()) == kQwenFunctionEnd) {
      p += kQwenFunctionEnd.size();
      break;
    }
    if (call.substr(p, kQwenParameter.size()) != kQwenParameter) return std::nullopt;
    const size_t key_end = call.find('>', p);
    if (key_end == std::string_view::npos) return std::nullopt;
    const std::string key(trim(call.substr(p + kQwenParameter.size(), key_end - p - kQwenParameter.size())));
    const size_t v_end = call.find(kQwenParameterEnd, key_end);
    if (key.empty() || v_end == std::string_view::npos) return std::nullopt;
    args[key] = qwen_value(call.substr(key_end + 1, v_end - key_end - 1));
    p = v_end + kQwenParameterEnd.size();
  }
  if (!trim(call.substr(std::min(p, call.size()))).empty()) return std::nullopt;
  return ToolCall{new_call_id(ToolCallFormat::QwenXml), std::string(name), args.dump()};
}

// Qwen3-Coder's and Qwen3.5's calls: <tool_call>, the call (qwen_call), </tool_call>.
ToolCallReply qwen_xml(std::string_view text) { return tagged_calls(text, qwen_call); }

// GLM-4.5's calls: <tool_call>NAME then <arg_key>/<arg_value> pairs, then </tool_call>.
ToolCallReply glm(std::string_view text) {
  ToolCallReply r;
  std::string rest;
  size_t at = 0;
  const auto fail = [&] { return ToolCallReply{std::string(text), {}}; };
  for (;;) {
    const size_t open = text.find(kHermesOpen, at);
    if (open == std::string_view::npos) break;
    rest += text.substr(at, open - at);
    const size_t body = open + kHermesOpen.size(), close = text.find(kHermesClose, body);
    const std::string_view call = text.substr(body, close == std::string_view::npos ? std::string_view::npos : close - body);
    const size_t first_key = call.find(kGlmKey);
    const std::string_view name = trim(call.substr(0, first_key));
    if (name.empty() || name.find_first_of("<>{}\n") != std::string_view::npos) return fail();
    ojson args = ojson::object();
    size_t p = first_key == std::string_view::npos ? call.size() : first_key;
    while (p < call.size()) {
      if (call.substr(p, kGlmKey.size()) != kGlmKey) return fail();
      const size_t key_end = call.find(kGlmKeyEnd, p);
      if (key_end == std::string_view::npos) return fail();
      const std::string key(trim(call.substr(p + kGlmKey.size(), key_end - p - kGlmKey.size())));
      const size_t v = call.find(kGlmValue, key_end);
      if (v == std::string_view::npos || !trim(call.substr(key_end + kGlmKeyEnd.size(), v - key_end - kGlmKeyEnd.size())).empty())
        return fail();
      const size_t v_end = call.find(kGlmValueEnd, v);
      if (v_end == std::string_view::npos || key.empty()) return fail();
      const std::string_view value = call.substr(v + kGlmValue.size(), v_end - v - kGlmValue.size());
      const auto j = parse_json(value);
      args[key] = j ? *j : ojson(std::string(value));
      p = v_end + kGlmValueEnd.size();
      while (p < call.size() && (call[p] == '\n' || call[p] == ' ')) p++;
    }
    r.calls.push_back({new_call_id(ToolCallFormat::Glm), std::string(name), args.dump()});
    if (close == std::string_view::npos) {
      at = text.size();
      break;
    }
    at = close + kHermesClose.size();
  }
  rest += text.substr(std::min(at, text.size()));
  if (r.calls.empty()) return fail();
  r.content = outside(std::move(rest));
  return r;
}

// One Gemma 4 value at t[p] (string between <|"|>, number, true/false/null, [...] or {key:value,...} with bare
// keys) into JSON; p moves past it. nullopt: not such a value, or nested deeper than any tool's arguments are
// (a reply of a thousand '[' must not exhaust the stack).
std::optional<ojson> gemma4_value(std::string_view t, size_t& p, int depth = 0) {
  constexpr int kMaxDepth = 64;
  if (depth > kMaxDepth) return std::nullopt;
  const auto skip_space = [&] {
    while (p < t.size() && (t[p] == ' ' || t[p] == '\n' || t[p] == '\t' || t[p] == '\r')) p++;
  };
  skip_space();
  if (p >= t.size()) return std::nullopt;
  if (t.substr(p, kGemmaQuote.size()) == kGemmaQuote) {
    const size_t end = t.find(kGemmaQuote, p + kGemmaQuote.size());
    if (end == std::string_view::npos) return std::nullopt;
    ojson s = std::string(t.substr(p + kGemmaQuote.size(), end - p - kGemmaQuote.size()));
    p = end + kGemmaQuote.size();
    return s;
  }
  if (t[p] == '{' || t[p] == '[') {
    const bool object = t[p] == '{';
    const char close = object ? '}' : ']';
    ojson out = object ? ojson::object() : ojson::array();
    p++;
    skip_space();
    if (p < t.size() && t[p] == close) {
      p++;
      return out;
    }
    for (;;) {
      if (object) {
        const size_t colon = t.find(':', p);
        if (colon == std::string_view::npos) return std::nullopt;
        const std::string_view key = trim(t.substr(p, colon - p));
        if (key.empty() || key.find_first_of("{}[],") != std::string_view::npos) return std::nullopt;
        p = colon + 1;
        auto v = gemma4_value(t, p, depth + 1);
        if (!v) return std::nullopt;
        out[std::string(key)] = std::move(*v);
      } else {
        auto v = gemma4_value(t, p, depth + 1);
        if (!v) return std::nullopt;
        out.push_back(std::move(*v));
      }
      skip_space();
      if (p < t.size() && t[p] == ',') {
        p++;
        skip_space();
        continue;
      }
      if (p < t.size() && t[p] == close) {
        p++;
        return out;
      }
      return std::nullopt;
    }
  }
  // A number or a literal: up to the next delimiter, read as JSON.
  size_t end = p;
  while (end < t.size() && t[end] != ',' && t[end] != '}' && t[end] != ']') end++;
  const auto j = parse_json(trim(t.substr(p, end - p)));
  if (!j || j->is_object() || j->is_array() || j->is_string()) return std::nullopt;
  p = end;
  return j;
}

// Gemma 4's calls: <|tool_call>call:NAME{...}<tool_call|>, one after another.
ToolCallReply gemma4(std::string_view text) {
  ToolCallReply r;
  std::string rest;
  size_t at = 0;
  const auto fail = [&] { return ToolCallReply{std::string(text), {}}; };
  for (;;) {
    const size_t open = text.find(kGemmaCall, at);
    if (open == std::string_view::npos) break;
    rest += text.substr(at, open - at);
    size_t p = open + kGemmaCall.size();
    if (text.substr(p, 5) != "call:") return fail();
    p += 5;
    const size_t brace = text.find('{', p);
    if (brace == std::string_view::npos) return fail();
    const std::string_view name = trim(text.substr(p, brace - p));
    if (name.empty() || name.find_first_of("<>{}:\n ") != std::string_view::npos) return fail();
    p = brace;
    const auto args = gemma4_value(text, p);
    if (!args || !args->is_object()) return fail();
    r.calls.push_back({new_call_id(ToolCallFormat::Gemma4), std::string(name), args->dump()});
    if (text.substr(p, kGemmaCallEnd.size()) == kGemmaCallEnd) p += kGemmaCallEnd.size();
    else if (p < text.size()) return fail();  // (a reply cut short after the arguments keeps its call)
    at = p;
  }
  rest += text.substr(std::min(at, text.size()));
  if (r.calls.empty()) return fail();
  r.content = outside(std::move(rest));
  return r;
}

ToolCallReply llama3_json(std::string_view text) {
  std::string_view t = trim(text);
  if (t.substr(0, kPythonTag.size()) == kPythonTag) t = trim(t.substr(kPythonTag.size()));
  if (t.empty() || t.front() != '{') return {std::string(text), {}};
  ToolCallReply r;
  // One object, or several joined by ';' (Llama 3.2 writes them so).
  size_t start = 0;
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < t.size(); i++) {
    const char c = t[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    if (c == '{') depth++;
    if (c == '}' && --depth == 0) {
      const auto j = parse_json(t.substr(start, i + 1 - start));
      const auto call = j ? call_from_object(*j, ToolCallFormat::Llama3Json) : std::nullopt;
      if (!call) return {std::string(text), {}};
      r.calls.push_back(*call);
      size_t next = i + 1;
      while (next < t.size() && (t[next] == ';' || t[next] == ' ' || t[next] == '\n')) next++;
      if (next < t.size() && t[next] != '{') return {std::string(text), {}};  // prose after the JSON: not a call
      start = next;
      i = next - 1;
    }
  }
  if (depth != 0 || r.calls.empty()) return {std::string(text), {}};
  return r;
}

ToolCallReply deepseek(std::string_view text) {
  const size_t begin = text.find(kDsCallsBegin);
  if (begin == std::string_view::npos) return {std::string(text), {}};
  ToolCallReply r;
  const size_t end = text.find(kDsCallsEnd, begin);
  const std::string_view block = text.substr(begin + kDsCallsBegin.size(),
                                             end == std::string_view::npos ? std::string_view::npos : end - begin - kDsCallsBegin.size());
  for (size_t at = 0; (at = block.find(kDsCallBegin, at)) != std::string_view::npos;) {
    const size_t body = at + kDsCallBegin.size();
    const size_t stop = block.find(kDsCallEnd, body);
    const std::string_view call = block.substr(body, stop == std::string_view::npos ? std::string_view::npos : stop - body);
    const size_t sep = call.find(kDsSep);
    if (sep == std::string_view::npos) return {std::string(text), {}};
    std::string_view name, args;
    const std::string_view left = trim(call.substr(0, sep)), right = call.substr(sep + kDsSep.size());
    if (left == "function") {  // V3 / R1: function<sep>NAME\n```json\n{...}\n```
      const size_t nl = right.find('\n');
      name = trim(right.substr(0, nl));
      args = nl == std::string_view::npos ? std::string_view("{}") : trim(right.substr(nl + 1));
      if (args.substr(0, 7) == "```json") args = args.substr(7);
      if (args.size() >= 3 && args.substr(args.size() - 3) == "```") args.remove_suffix(3);
      args = trim(args);
    } else {  // V3.1: NAME<sep>{...}
      name = left;
      args = trim(right);
    }
    const auto j = parse_json(args);
    if (name.empty() || !j || !j->is_object()) return {std::string(text), {}};
    r.calls.push_back({new_call_id(ToolCallFormat::DeepSeek), std::string(name), j->dump()});
    if (stop == std::string_view::npos) break;
    at = stop + kDsCallEnd.size();
  }
  if (r.calls.empty()) return {std::string(text), {}};
  std::string rest(text.substr(0, begin));
  if (end != std::string_view::npos) rest += text.substr(end + kDsCallsEnd.size());
  r.content = outside(std::move(rest));
  return r;
}

ToolCallReply mistral(std::string_view text) {
  const size_t first = text.find(kMistralCalls);
  if (first == std::string_view::npos) return {std::string(text), {}};
  ToolCallReply r;
  std::string_view rest = text.substr(first);
  while (rest.substr(0, kMistralCalls.size()) == kMistralCalls) {
    rest = trim(rest.substr(kMistralCalls.size()));
    if (!rest.empty() && rest.front() == '[') {  // [{"name": ..., "arguments": ...}, ...]
      const auto j = parse_json(rest);
      if (!j || !j->is_array()) return {std::string(text), {}};
      for (const auto& x : *j) {
        const auto call = call_from_object(x, ToolCallFormat::Mistral);
        if (!call) return {std::string(text), {}};
        r.calls.push_back(*call);
      }
      rest = {};
      break;
    }
    const size_t args = rest.find(kMistralArgs);  // NAME[ARGS]{...}
    if (args == std::string_view::npos) return {std::string(text), {}};
    const std::string_view name = trim(rest.substr(0, args));
    std::string_view body = rest.substr(args + kMistralArgs.size());
    const size_t next = body.find(kMistralCalls);
    const auto j = parse_json(trim(body.substr(0, next)));
    if (name.empty() || !j || !j->is_object()) return {std::string(text), {}};
    r.calls.push_back({new_call_id(ToolCallFormat::Mistral), std::string(name), j->dump()});
    rest = next == std::string_view::npos ? std::string_view{} : body.substr(next);
  }
  if (r.calls.empty()) return {std::string(text), {}};
  r.content = outside(std::string(text.substr(0, first)));
  return r;
}

// DeepSeek-V3.2/V4's DSML block: the calls of one <｜DSML｜function_calls> or <｜DSML｜tool_calls> element.
ToolCallReply dsml(std::string_view text) {
  size_t begin = std::min(text.find(kDsmlFunctionCalls), text.find(kDsmlToolCalls));
  if (begin == std::string_view::npos) return {std::string(text), {}};
  const bool v4 = text.substr(begin, kDsmlToolCalls.size()) == kDsmlToolCalls;
  const std::string_view open = v4 ? kDsmlToolCalls : kDsmlFunctionCalls;
  const std::string close = "</" + std::string(open.substr(1));
  const size_t body = begin + open.size();
  const size_t end = text.find(close, body);
  const std::string_view block = text.substr(body, end == std::string_view::npos ? std::string_view::npos : end - body);
  const auto fail = [&] { return ToolCallReply{std::string(text), {}}; };
  ToolCallReply r;
  size_t at = 0;
  for (;;) {
    const size_t inv = block.find(kDsmlInvoke, at);
    if (inv == std::string_view::npos) {
      if (!trim(block.substr(at)).empty()) return fail();  // stray text inside the block
      break;
    }
    if (!trim(block.substr(at, inv - at)).empty()) return fail();
    const size_t name_at = inv + kDsmlInvoke.size(), name_end = block.find("\">", name_at);
    if (name_end == std::string_view::npos) return fail();
    const std::string_view name = block.substr(name_at, name_end - name_at);
    const size_t inv_end = block.find(kDsmlInvokeEnd, name_end);
    if (name.empty() || inv_end == std::string_view::npos) return fail();
    const std::string_view params = block.substr(name_end + 2, inv_end - name_end - 2);
    ojson args = ojson::object();
    size_t p = 0;
    for (;;) {
      const size_t par = params.find(kDsmlParameter, p);
      if (par == std::string_view::npos) {
        if (!trim(params.substr(p)).empty()) return fail();
        break;
      }
      if (!trim(params.substr(p, par - p)).empty()) return fail();
      const size_t key_at = par + kDsmlParameter.size(), key_end = params.find('"', key_at);
      if (key_end == std::string_view::npos) return fail();
      const std::string key(params.substr(key_at, key_end - key_at));
      const size_t tag_end = params.find('>', key_end);
      if (tag_end == std::string_view::npos) return fail();
      const std::string_view attrs = trim(params.substr(key_end + 1, tag_end - key_end - 1));
      const size_t value_end = params.find(kDsmlParameterEnd, tag_end);
      if (value_end == std::string_view::npos || key.empty()) return fail();
      const std::string_view value = params.substr(tag_end + 1, value_end - tag_end - 1);
      if (attrs == "string=\"true\"") {
        args[key] = std::string(value);
      } else if (attrs == "string=\"false\"" || attrs.empty()) {
        const auto j = parse_json(trim(value));
        if (j) args[key] = *j;
        else if (attrs.empty()) args[key] = std::string(value);  // untyped: JSON when it reads as JSON
        else return fail();
      } else {
        return fail();
      }
      p = value_end + kDsmlParameterEnd.size();
    }
    r.calls.push_back({new_call_id(ToolCallFormat::Dsml), std::string(name), args.dump()});
    at = inv_end + kDsmlInvokeEnd.size();
  }
  if (r.calls.empty()) return fail();
  std::string rest(text.substr(0, begin));
  if (end != std::string_view::npos) rest += text.substr(end + close.size());
  r.content = outside(std::move(rest));
  return r;
}

// Where a call may begin, per format.
std::vector<std::string_view> start_markers(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::Hermes: return {kHermesOpen};
    case ToolCallFormat::Llama3Json: return {kPythonTag};
    case ToolCallFormat::DeepSeek: return {kDsCallsBegin};
    case ToolCallFormat::Mistral: return {kMistralCalls};
    case ToolCallFormat::Dsml: return {kDsmlFunctionCalls, kDsmlToolCalls};
    case ToolCallFormat::Glm: return {kHermesOpen};
    case ToolCallFormat::Gemma4: return {kGemmaCall};
    case ToolCallFormat::QwenXml: return {kHermesOpen};
    case ToolCallFormat::Harmony:  // read by chat/harmony.h, not through ToolCallStream
    case ToolCallFormat::None: return {};
  }
  return {};
}

}  // namespace

std::vector<std::string_view> tool_call_markers(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::Hermes: return {kHermesOpen, kHermesClose};
    case ToolCallFormat::Llama3Json: return {kPythonTag};
    case ToolCallFormat::DeepSeek: return {kDsCallsBegin, kDsCallsEnd, kDsCallBegin, kDsCallEnd, kDsSep};
    case ToolCallFormat::Mistral: return {kMistralCalls, kMistralArgs};
    case ToolCallFormat::Dsml: return {kDsmlFunctionCalls, kDsmlToolCalls, kDsmlInvokeEnd, kDsmlParameterEnd};
    // Every marker of the reply's structure (its channels are parsed whether or not tools were offered).
    case ToolCallFormat::Harmony: return {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>", "<|end|>"};
    case ToolCallFormat::Glm: return {kHermesOpen, kHermesClose, kGlmKey, kGlmKeyEnd, kGlmValue, kGlmValueEnd};
    case ToolCallFormat::Gemma4: return {kGemmaCall, kGemmaCallEnd, kGemmaQuote};
    case ToolCallFormat::QwenXml:
      return {kHermesOpen, kHermesClose, kQwenFunction, kQwenFunctionEnd, kQwenParameter, kQwenParameterEnd};
    case ToolCallFormat::None: return {};
  }
  return {};
}

std::optional<ToolCallFormat> tool_call_format_from_name(const std::string& name) {
  if (name == "hermes") return ToolCallFormat::Hermes;
  if (name == "llama3_json") return ToolCallFormat::Llama3Json;
  if (name == "deepseek") return ToolCallFormat::DeepSeek;
  if (name == "mistral") return ToolCallFormat::Mistral;
  if (name == "dsml") return ToolCallFormat::Dsml;
  if (name == "harmony") return ToolCallFormat::Harmony;
  if (name == "glm") return ToolCallFormat::Glm;
  if (name == "gemma4") return ToolCallFormat::Gemma4;
  if (name == "qwen3_coder") return ToolCallFormat::QwenXml;
  if (name == "none") return ToolCallFormat::None;
  return std::nullopt;
}

const char* tool_call_format_name(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::Hermes: return "hermes";
    case ToolCallFormat::Llama3Json: return "llama3_json";
    case ToolCallFormat::DeepSeek: return "deepseek";
    case ToolCallFormat::Mistral: return "mistral";
    case ToolCallFormat::Dsml: return "dsml";
    case ToolCallFormat::Harmony: return "harmony";
    case ToolCallFormat::Glm: return "glm";
    case ToolCallFormat::Gemma4: return "gemma4";
    case ToolCallFormat::QwenXml: return "qwen3_coder";
    case ToolCallFormat::None: return "none";
  }
  return "?";
}

const char* tool_call_format_names() {
  return "hermes, llama3_json, deepseek, mistral, dsml, harmony, glm, gemma4, qwen3_coder, none";
}

ToolCallFormat detect_tool_call_format(std::string_view src) {
  const auto has = [&](std::string_view s) { return src.find(s) != std::string_view::npos; };
  if (has(kDsml)) return ToolCallFormat::Dsml;
  if (has("<|channel|>")) return ToolCallFormat::Harmony;
  if (has(kGlmKey)) return ToolCallFormat::Glm;  // before hermes: GLM's calls open with <tool_call> too
  if (has(kGemmaCall)) return ToolCallFormat::Gemma4;
  if (has(kQwenFunction) && has(kQwenParameter)) return ToolCallFormat::QwenXml;  // before hermes: <tool_call> too
  if (has(kDsCallBegin) || has(kDsCallsBegin)) return ToolCallFormat::DeepSeek;
  if (has(kMistralCalls)) return ToolCallFormat::Mistral;
  if (has(kHermesOpen)) return ToolCallFormat::Hermes;
  if (has(kPythonTag) || (has("<|start_header_id|>") && has("tool_call"))) return ToolCallFormat::Llama3Json;
  return ToolCallFormat::None;
}

ToolCallReply parse_tool_calls(ToolCallFormat format, std::string_view text) {
  switch (format) {
    case ToolCallFormat::Hermes: return hermes(text);
    case ToolCallFormat::Llama3Json: return llama3_json(text);
    case ToolCallFormat::DeepSeek: return deepseek(text);
    case ToolCallFormat::Mistral: return mistral(text);
    case ToolCallFormat::Dsml: return dsml(text);
    case ToolCallFormat::Glm: return glm(text);
    case ToolCallFormat::Gemma4: return gemma4(text);
    case ToolCallFormat::QwenXml: return qwen_xml(text);
    case ToolCallFormat::Harmony: {
      HarmonyStream h;
      HarmonyPart a = h.push(text), b = h.finish();
      std::string content = a.content + b.content;
      return {content.empty() ? std::nullopt : std::optional<std::string>(std::move(content)), std::move(b.calls)};
    }
    case ToolCallFormat::None: break;
  }
  return {std::string(text), {}};
}

std::string ToolCallStream::push(std::string_view text) {
  held_ += text;
  if (holding_ || format_ == ToolCallFormat::None) {
    if (format_ == ToolCallFormat::None) return std::exchange(held_, {});
    return {};
  }
  // A Llama 3 call is the whole reply: one that opens with '{' is held to the end.
  if (format_ == ToolCallFormat::Llama3Json && !any_text_) {
    const std::string_view t = trim(held_);
    if (t.empty()) return {};
    const size_t n = std::min(t.size(), kPythonTag.size());
    if (t.front() == '{' || (n == kPythonTag.size() && t.substr(0, n) == kPythonTag)) {
      holding_ = true;
      return {};
    }
    if (t.substr(0, n) == kPythonTag.substr(0, n)) return {};  // may still become <|python_tag|>
  }
  size_t first = std::string::npos;
  for (const auto m : start_markers(format_)) first = std::min(first, held_.find(m));
  if (first != std::string::npos) {
    holding_ = true;
    std::string out = held_.substr(0, first);
    held_.erase(0, first);
    any_text_ = any_text_ || !trim(out).empty();
    return out;
  }
  // Keep a tail that may be the start of a marker.
  size_t keep = 0;
  for (const auto m : start_markers(format_))
    for (size_t n = std::min(held_.size(), m.size() - 1); n > keep; n--)
      if (std::string_view(held_).substr(held_.size() - n) == m.substr(0, n)) {
        keep = n;
        break;
      }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  any_text_ = any_text_ || !trim(out).empty();
  return out;
}

ToolCallReply ToolCallStream::finish() {
  std::string held = std::exchange(held_, {});
  if (!holding_) return {held.empty() ? std::nullopt : std::optional<std::string>(held), {}};
  ToolCallReply r = parse_tool_calls(format_, held);
  if (r.calls.empty()) r.content = held;  // not a call after all: all of it is content
  return r;
}

}  // namespace kestrel

// Tool calls read from replies in each family's format, whole and streamed
// in random pieces (the same calls and content either way); replies that are
// not calls stay content byte for byte.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "chat/reply_parser.h"
#include "chat/tool_calls.h"

namespace kestrel {

using json = nlohmann::json;

namespace {

struct Expected {
  std::optional<std::string> content;
  std::vector<std::pair<std::string, json>> calls;  // name, arguments
};

ToolCallReply streamed(ToolCallFormat f, const std::string& text, uint32_t seed) {
  std::mt19937 rng(seed);
  ToolCallStream s(f);
  std::string content;
  for (size_t at = 0; at < text.size();) {
    const size_t n = std::min<size_t>(text.size() - at, 1 + rng() % 5);
    content += s.push(std::string_view(text).substr(at, n));
    at += n;
  }
  ToolCallReply end = s.finish();
  if (end.content) content += *end.content;
  end.content = content.empty() ? std::nullopt : std::optional<std::string>(content);
  return end;
}

void expect_reply(ToolCallFormat f, const std::string& text, const Expected& want) {
  const auto check = [&](const ToolCallReply& r, const std::string& how) {
    ASSERT_EQ(r.calls.size(), want.calls.size()) << how << ": " << text;
    for (size_t i = 0; i < r.calls.size(); i++) {
      EXPECT_EQ(r.calls[i].name, want.calls[i].first) << how;
      EXPECT_EQ(json::parse(r.calls[i].arguments), want.calls[i].second) << how;
      EXPECT_EQ(r.calls[i].id.size(), f == ToolCallFormat::Mistral ? 9u : 29u) << r.calls[i].id;
    }
  };
  const ToolCallReply whole = parse_tool_calls(f, text);
  check(whole, "whole");
  EXPECT_EQ(whole.content, want.content) << text;
  for (uint32_t seed = 0; seed < 30; seed++) {
    const ToolCallReply r = streamed(f, text, seed);
    check(r, "streamed");
    // Streamed content is the same text, except that what precedes a call is not trimmed.
    const std::string got = r.content.value_or(""), expect = want.content.value_or("");
    if (want.calls.empty())
      EXPECT_EQ(got, expect) << "seed " << seed;
    else
      EXPECT_NE(got.find(expect), std::string::npos) << "seed " << seed << ": '" << got << "'";
  }
}

TEST(ToolCalls, Hermes) {
  const auto f = ToolCallFormat::Hermes;
  expect_reply(f, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
               {std::nullopt, {{"get_weather", {{"city", "Paris"}}}}});
  expect_reply(f,
               "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n"
               "<tool_call>\n{\"name\": \"b\", \"arguments\": \"{\\\"y\\\": [2]}\"}\n</tool_call>",
               {"Let me check.", {{"a", {{"x", 1}}}, {"b", {{"y", {2}}}}}});
  // Not calls: kept exactly.
  expect_reply(f, "Plain answer with <b>tags</b>.\n", {"Plain answer with <b>tags</b>.\n", {}});
  expect_reply(f, "<tool_call>{\"name\": broken json}</tool_call>", {"<tool_call>{\"name\": broken json}</tool_call>", {}});
  expect_reply(f, "ends with <tool_ca", {"ends with <tool_ca", {}});
}

TEST(ToolCalls, Llama3Json) {
  const auto f = ToolCallFormat::Llama3Json;
  expect_reply(f, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris, \\\"FR\\\" {x}\"}}",
               {std::nullopt, {{"get_weather", {{"city", "Paris, \"FR\" {x}"}}}}});
  expect_reply(f, "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"n\": 2}}",
               {std::nullopt, {{"a", json::object()}, {"b", {{"n", 2}}}}});
  expect_reply(f, "The weather is {warm} today.", {"The weather is {warm} today.", {}});
  expect_reply(f, "{\"answer\": 42}", {"{\"answer\": 42}", {}});  // JSON, but no call
  expect_reply(f, "{\"name\": \"a\", \"parameters\": {}} and then prose", {"{\"name\": \"a\", \"parameters\": {}} and then prose", {}});
}

TEST(ToolCalls, DeepSeek) {
  const auto f = ToolCallFormat::DeepSeek;
  expect_reply(f,
               "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
               "{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n"
               "```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
               {"Checking.", {{"get_weather", {{"city", "Paris"}}}, {"get_time", json::object()}}});
  // V3.1
  expect_reply(f, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{\"q\": \"kestrel\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
               {std::nullopt, {{"search", {{"q", "kestrel"}}}}});
  expect_reply(f, "No tools needed.", {"No tools needed.", {}});
}

TEST(ToolCalls, Mistral) {
  const auto f = ToolCallFormat::Mistral;
  expect_reply(f, "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": {}}]",
               {std::nullopt, {{"a", {{"x", 1}}}, {"b", json::object()}}});
  expect_reply(f, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[ARGS]{}",
               {std::nullopt, {{"get_weather", {{"city", "Paris"}}}, {"get_time", json::object()}}});
  expect_reply(f, "Sure [TOOL_CALL] is not a call", {"Sure [TOOL_CALL] is not a call", {}});
}

// DeepSeek-V3.2 (<｜DSML｜function_calls>) and V4 (<｜DSML｜tool_calls>): string="true" values as written
// (no escaping: quotes, newlines and JSON-looking text stay strings), the others read as JSON.
TEST(ToolCalls, Dsml) {
  const auto f = ToolCallFormat::Dsml;
  expect_reply(f,
               "Let me check.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
               "<｜DSML｜parameter name=\"city\" string=\"true\">São \"Paulo\"\n{x}</｜DSML｜parameter>\n"
               "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
               "<｜DSML｜parameter name=\"opts\" string=\"false\">{\"units\": [\"C\", null], \"hourly\": true}</｜DSML｜parameter>\n"
               "</｜DSML｜invoke>\n<｜DSML｜invoke name=\"get_time\">\n</｜DSML｜invoke>\n</｜DSML｜function_calls>",
               {"Let me check.",
                {{"get_weather", {{"city", "São \"Paulo\"\n{x}"}, {"days", 3}, {"opts", {{"units", {"C", nullptr}}, {"hourly", true}}}}},
                 {"get_time", json::object()}}});
  expect_reply(f,
               "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"search\">\n<｜DSML｜parameter name=\"q\" string=\"true\">42</｜DSML｜parameter>\n"
               "</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
               {std::nullopt, {{"search", {{"q", "42"}}}}});
  // Not calls: they stay content, whole.
  for (const char* text : {"No tools needed.",
                           "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"a\">\n<｜DSML｜parameter name=\"n\" string=\"false\">not json"
                           "</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
                           "<｜DSML｜tool_calls>\nprose inside\n</｜DSML｜tool_calls>",
                           "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"a\">\n"})
    expect_reply(f, text, {std::string(text), {}});
}

// gpt-oss's harmony replies through the chat reply parser (the server's path), whole and in random pieces:
// analysis is reasoning, final (and commentary to no one) content, a message to functions.NAME a call — in
// either place the model writes its recipient.
struct HarmonyWant {
  std::string reasoning, content;
  std::vector<std::pair<std::string, json>> calls;
};

void expect_harmony(const std::string& text, const HarmonyWant& want, bool split = true) {
  for (uint32_t seed = 0; seed < 30; seed++) {
    std::mt19937 rng(seed);
    ReplyParser p(split ? std::optional<bool>(false) : std::nullopt, ToolCallFormat::Harmony, true);
    ReplyPart all;
    for (size_t at = 0; at < text.size();) {
      const size_t n = seed == 0 ? text.size() : std::min<size_t>(text.size() - at, 1 + rng() % 6);
      ReplyPart part = p.push(std::string_view(text).substr(at, n));
      all.reasoning += part.reasoning, all.content += part.content;
      at += n;
    }
    ReplyPart end = p.finish();
    all.reasoning += end.reasoning, all.content += end.content;
    EXPECT_EQ(all.reasoning, want.reasoning) << "seed " << seed << ": " << text;
    EXPECT_EQ(all.content, want.content) << "seed " << seed << ": " << text;
    ASSERT_EQ(end.calls.size(), want.calls.size()) << text;
    for (size_t i = 0; i < end.calls.size(); i++) {
      EXPECT_EQ(end.calls[i].name, want.calls[i].first);
      EXPECT_EQ(json::parse(end.calls[i].arguments), want.calls[i].second);
      EXPECT_EQ(end.calls[i].id.rfind("call_", 0), 0u);
    }
  }
}

TEST(ToolCalls, Harmony) {
  expect_harmony("<|channel|>analysis<|message|>User asks 2+2. Easy.<|end|><|start|>assistant<|channel|>final"
                 "<|message|>2 + 2 = 4.",
                 {"User asks 2+2. Easy.", "2 + 2 = 4.", {}});
  // The recipient after the channel (what the model writes) or before it (what gpt-oss's template writes).
  expect_harmony("<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
                 "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"São Paulo\"}<|call|>",
                 {"Need weather.", "", {{"get_weather", {{"city", "São Paulo"}}}}});
  expect_harmony(" to=functions.get_time<|channel|>commentary json<|message|>{}",
                 {"", "", {{"get_time", json::object()}}});
  // A preamble (commentary to no one) is content; two calls in one reply.
  expect_harmony("<|channel|>commentary<|message|>Checking both.<|end|><|start|>assistant to=functions.a"
                 "<|channel|>commentary json<|message|>{\"n\": 1}<|call|><|start|>assistant to=functions.b"
                 "<|channel|>commentary json<|message|>{\"n\": [2]}<|call|>",
                 {"", "Checking both.", {{"a", {{"n", 1}}}, {"b", {{"n", {2}}}}}});
  // Not harmony at all, or a call whose arguments are not an object: content, nothing lost.
  expect_harmony("Just text, with a < and a |.", {"", "Just text, with a < and a |.", {}});
  expect_harmony("<|channel|>commentary to=functions.f json<|message|>not json<|call|>", {"", "not json", {}});
  // A header never finished is content as written.
  expect_harmony("<|channel|>analy", {"", "<|channel|>analy", {}});
  // Reasoning not split (--reasoning-format none): the analysis joins the content.
  expect_harmony("<|channel|>analysis<|message|>Hmm.<|end|><|start|>assistant<|channel|>final<|message|>Yes.",
                 {"", "Hmm.Yes.", {}}, false);
  EXPECT_EQ(detect_tool_call_format("{{- '<|start|>assistant<|channel|>final<|message|>' }}"), ToolCallFormat::Harmony);
}

// GLM-4.5/4.6/4.7: <arg_key>/<arg_value> pairs, with newlines (4.6) or without (4.7); a value that reads as
// JSON is JSON, else the string as written.
TEST(ToolCalls, Glm) {
  const auto f = ToolCallFormat::Glm;
  expect_reply(f,
               "Let me look.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>São \"Paulo\"</arg_value>\n"
               "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
               {"Let me look.", {{"get_weather", {{"city", "São \"Paulo\""}, {"days", 3}}}}});
  expect_reply(f,
               "<tool_call>a<arg_key>x</arg_key><arg_value>{\"k\": [1, null]}</arg_value></tool_call>"
               "<tool_call>ping</tool_call>",
               {std::nullopt, {{"a", {{"x", {{"k", {1, nullptr}}}}}}, {"ping", json::object()}}});
  // Not calls: they stay content, whole.
  for (const char* text : {"No tools.", "<tool_call>{\"name\": \"x\"}</tool_call>",
                           "<tool_call>a<arg_key>x</arg_key>oops</tool_call>", "<tool_call>a<arg_key>x</arg_key>"})
    expect_reply(f, text, {std::string(text), {}});
  EXPECT_EQ(detect_tool_call_format("<tool_call>{{ tc.name }}<arg_key>{{ k }}</arg_key>"), ToolCallFormat::Glm);
}

// Gemma 4: <|tool_call>call:NAME{...}<tool_call|>, bare keys, strings between <|"|> (quotes and commas inside
// kept), numbers, booleans, null, nested objects and arrays; calls back to back.
TEST(ToolCalls, Gemma4) {
  const auto f = ToolCallFormat::Gemma4;
  expect_reply(f,
               "Let me look.<|tool_call>call:get_weather{city:<|\"|>São \"Paulo\", SP<|\"|>,days:3,metric:true,"
               "extra:{tags:[<|\"|>a<|\"|>,1.5,null],n:{}}}<tool_call|>",
               {"Let me look.",
                {{"get_weather",
                  {{"city", "São \"Paulo\", SP"}, {"days", 3}, {"metric", true},
                   {"extra", {{"tags", {"a", 1.5, nullptr}}, {"n", json::object()}}}}}}});
  expect_reply(f, "<|tool_call>call:a{x:-2}<tool_call|><|tool_call>call:ping{}<tool_call|>",
               {std::nullopt, {{"a", {{"x", -2}}}, {"ping", json::object()}}});
  // Not calls: they stay content, whole.
  for (const char* text : {"No tools.", "<|tool_call>get_weather{}<tool_call|>", "<|tool_call>call:a{x:<tool_call|>",
                           "<|tool_call>call:a{x:<|\"|>open}<tool_call|>", "<|tool_call>call:a{x:word}<tool_call|>"})
    expect_reply(f, text, {std::string(text), {}});
  // Nesting deeper than any arguments (here 100000 levels) is not a call, and does not exhaust the stack.
  const std::string deep = "<|tool_call>call:a{x:" + std::string(100000, '[') + std::string(100000, ']') + "}<tool_call|>";
  expect_reply(f, deep, {deep, {}});
  EXPECT_EQ(detect_tool_call_format("{{- '<|tool_call>call:' + function['name'] + '{' -}}"), ToolCallFormat::Gemma4);
}

// Qwen3-Coder / Qwen3.5: <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n...</function>\n</tool_call>,
// values as the template writes them (strings as is, objects and arrays as JSON, Python's True/False/None).
TEST(ToolCalls, QwenXml) {
  const auto f = ToolCallFormat::QwenXml;
  expect_reply(f,
               "Let me look.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSão \"Paulo\"\nline 2\n</parameter>\n"
               "<parameter=days>\n3\n</parameter>\n<parameter=metric>\nTrue\n</parameter>\n<parameter=extra>\n"
               "{\"tags\": [\"a\", 1.5, null]}\n</parameter>\n<parameter=note>\nNone\n</parameter>\n</function>\n</tool_call>",
               {"Let me look.",
                {{"get_weather",
                  {{"city", "São \"Paulo\"\nline 2"}, {"days", 3}, {"metric", true}, {"extra", {{"tags", {"a", 1.5, nullptr}}}},
                   {"note", nullptr}}}}});
  expect_reply(f,
               "<tool_call>\n<function=a>\n<parameter=x>\n-2\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n"
               "<function=ping>\n</function>\n</tool_call>",
               {std::nullopt, {{"a", {{"x", -2}}}, {"ping", json::object()}}});
  // Not calls: they stay content, whole.
  for (const char* text : {"No tools.", "<tool_call>\n{\"name\": \"a\"}\n</tool_call>",
                           "<tool_call>\n<function=a>\n<parameter=x>\n1\n</function>\n</tool_call>",
                           "<tool_call>\n<function=a b>\n</function>\n</tool_call>",
                           "<tool_call>\n<function=a>\n</function>\ntrailing\n</tool_call>"})
    expect_reply(f, text, {std::string(text), {}});
  EXPECT_EQ(detect_tool_call_format("{{- '<tool_call>\\n<function=' + tool_call.name + '>\\n' }}{{- '<parameter=' }}"),
            ToolCallFormat::QwenXml);
}

TEST(ToolCalls, FormatNamesRoundTrip) {
  for (const char* n :
       {"hermes", "llama3_json", "deepseek", "mistral", "dsml", "harmony", "glm", "gemma4", "qwen3_coder", "none"})
    EXPECT_STREQ(tool_call_format_name(*tool_call_format_from_name(n)), n);
  EXPECT_FALSE(tool_call_format_from_name("xml"));
}

}  // namespace
}  // namespace kestrel

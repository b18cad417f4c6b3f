// Chat features through `kestrel serve` — chat templates: the prompt a chat body renders to
// (POST /apply-template, llama.cpp's endpoint) for a Jinja template given
// with --chat-template FILE and switches from --chat-template-kwargs or the
// request; tool turns, the developer role; the template's own refusals as
// 400s carrying its words; a template that does not parse stops start-up;
// tools offered and refused by name; --reasoning-format: with DeepSeek-R1's
// template the reply begins inside <think>, so what stories260K writes is all
// reasoning_content, exactly what a server without the split answers as
// content, whole and as streamed deltas.
#include <gmock/gmock.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "cli_process.h"
#include "serve_process.h"
#include "test_support.h"

namespace kestrel {

using ojson = nlohmann::ordered_json;

namespace {
using ::testing::HasSubstr;

using test::kStories;

// A small template in the shape of real ones: it refuses a system turn when
// told to, prints tool calls with tojson, and reads enable_thinking.
constexpr const char* kTemplate = R"({%- if no_system is defined and no_system and messages[0].role == 'system' -%}
{{ raise_exception('System role not supported') }}
{%- endif -%}
{%- for m in messages -%}
<{{ m.role }}>{{ m.content if m.content is string else '' }}
{%- if m.tool_calls is defined %}{% for c in m.tool_calls %}[call {{ c.function.name }} {{ c.function.arguments | tojson }}]{% endfor %}{% endif %}
{%- if m.tool_call_id is defined %}[for {{ m.tool_call_id }}]{% endif %}
{%- endfor -%}
{%- if add_generation_prompt %}<assistant>{% if enable_thinking is defined and not enable_thinking %}<no_think>{% endif %}{% endif %}
)";

struct Reply {
  int status = 0;
  ojson body;
};

Reply post(httplib::Client& c, const std::string& path, const std::string& body) {
  auto r = c.Post(path, body, "application/json");
  if (!r) {
    ADD_FAILURE() << "no response for " << body;
    return {};
  }
  return {r->status, ojson::parse(r->body, nullptr, false)};
}

TEST(ServerChatTemplate, RendersTheTemplateFileWithToolTurnsRolesAndKwargs) {
  test::TempDir dir;
  test::write_bytes(dir.file("t.jinja"), kTemplate);
  test::ServerProcess server({"-m", kStories, "--chat-template", dir.file("t.jinja"), "--chat-template-kwargs",
                              R"({"enable_thinking": false})"});
  auto c = server.client();
  EXPECT_THAT(server.log(), HasSubstr("chat template file " + dir.file("t.jinja")));

  // A tool conversation: the assistant's call (content null, arguments a JSON
  // string as OpenAI sends it, rendered by the template as an object), the
  // tool's answer; developer is the system turn.
  const std::string convo = R"({"messages": [
    {"role": "developer", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 2}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"}]})";
  Reply r = post(c, "/apply-template", convo);
  ASSERT_EQ(r.status, 200) << r.body.dump();
  EXPECT_EQ(r.body["prompt"], "<system>Be brief.<user>Weather in Paris?<assistant>"
                              "[call get_weather {\"city\": \"Paris\", \"days\": 2}]<tool>{\"temp\": 21}[for call_1]"
                              "<assistant><no_think>");
  // The request's kwargs win over the server's.
  ojson with_kwargs = ojson::parse(convo);
  with_kwargs["chat_template_kwargs"] = {{"enable_thinking", true}};
  r = post(c, "/apply-template", with_kwargs.dump());
  ASSERT_EQ(r.status, 200) << r.body.dump();
  EXPECT_THAT(r.body["prompt"].get<std::string>(), ::testing::EndsWith("[for call_1]<assistant>"));

  // The same conversation generates.
  ojson completion = ojson::parse(convo);
  completion["max_tokens"] = 4;
  r = post(c, "/v1/chat/completions", completion.dump());
  EXPECT_EQ(r.status, 200) << r.body.dump();
  EXPECT_EQ(r.body["usage"]["completion_tokens"], 4);

  // The template's own refusal is a 400 with its words, for both endpoints.
  const std::string refused =
      R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
          "chat_template_kwargs": {"no_system": true}})";
  for (const char* path : {"/apply-template", "/v1/chat/completions"}) {
    r = post(c, path, refused);
    EXPECT_EQ(r.status, 400) << path;
    EXPECT_EQ(r.body["error"]["message"], "System role not supported") << path;
    EXPECT_EQ(r.body["error"]["param"], "messages") << path;
  }
  // Refusals are logged with the reason the client got.
  EXPECT_THAT(server.log(), HasSubstr("request rejected (400, messages): System role not supported"));
  // Bad tool turns are named.
  r = post(c, "/v1/chat/completions",
           R"({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"type": "function"}]}]})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["param"], "messages[0].tool_calls[0]");
  r = post(c, "/v1/chat/completions", R"({"messages": [{"role": "assistant", "content": null}]})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["param"], "messages[0].content");
  r = post(c, "/apply-template", R"({"messages": [{"role": "user", "content": "x"}], "temprature": 2})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["param"], "temprature");  // a chat body's fields are accepted, unknown ones named
}

// OpenAI's reasoning_effort reaches a template that reads it (DeepSeek-V4's real template writes its "max"
// effort preamble when thinking), and is a 400 where the template would ignore it. With V4's template,
// tool_choice "required" holds the reply to DSML calls.
TEST(ServerChatTemplate, ReasoningEffortReachesTemplatesThatReadIt) {
  test::TempDir dir;
  test::write_bytes(dir.file("t.jinja"), kTemplate);
  const std::string v4 = test::shared("templates/deepseek-ai-DeepSeek-V4.jinja");
  test::ServerProcess server({"-m", kStories, "-c", "4096", "--chat-template", v4});
  auto c = server.client();
  const std::string user = R"("messages": [{"role": "user", "content": "Prove it."}], "chat_template_kwargs": {"thinking": true})";
  Reply r = post(c, "/apply-template", "{" + user + R"(, "reasoning_effort": "max"})");
  ASSERT_EQ(r.status, 200) << r.body.dump();
  EXPECT_THAT(r.body["prompt"].get<std::string>(), HasSubstr("Reasoning Effort: Absolute maximum"));
  r = post(c, "/apply-template", "{" + user + "}");
  ASSERT_EQ(r.status, 200) << r.body.dump();
  EXPECT_THAT(r.body["prompt"].get<std::string>(), ::testing::Not(HasSubstr("Reasoning Effort")));
  r = post(c, "/v1/chat/completions", "{" + user + R"(, "reasoning_effort": 3})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["param"], "reasoning_effort");
  // tool_choice "required": the reply is held to DSML calls, read back as tool_calls.
  // With thinking on the prompt leaves <think> open, and a reply held to calls cannot reason first: a 400.
  r = post(c, "/v1/chat/completions", "{" + user + R"(, "tools": [{"type": "function", "function": {"name": "f"}}],
      "tool_choice": "required"})");
  EXPECT_EQ(r.status, 400) << r.body.dump();
  EXPECT_EQ(r.body["error"]["param"], "tool_choice");
  // (Thinking off: the grammar holds the whole reply to calls, with no reasoning before them.)
  const std::string plain_user = R"("messages": [{"role": "user", "content": "Count."}])";
  r = post(c, "/v1/chat/completions", "{" + plain_user + R"(, "max_tokens": 600, "tools": )" + std::string(R"([{"type": "function", "function":
      {"name": "f", "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}}])") +
      R"(, "tool_choice": "required", "parallel_tool_calls": false})");
  ASSERT_EQ(r.status, 200) << r.body.dump();
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "tool_calls") << r.body.dump();
  ASSERT_EQ(r.body["choices"][0]["message"]["tool_calls"].size(), 1u) << r.body.dump();
  EXPECT_EQ(r.body["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "f");
  EXPECT_TRUE(
      ojson::parse(r.body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>())["n"]
          .is_number_integer())
      << r.body.dump();
  r = post(c, "/v1/completions", R"({"prompt": "x", "reasoning_effort": "low"})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["param"], "reasoning_effort");

  test::ServerProcess plain({"-m", kStories, "--chat-template", dir.file("t.jinja")});
  auto p = plain.client();
  r = post(p, "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "reasoning_effort": "high"})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["param"], "reasoning_effort");
  EXPECT_THAT(r.body["error"]["message"].get<std::string>(), HasSubstr("does not read"));
}

const char* kTools = R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])";

TEST(ServerChatTemplate, ToolsReachTheTemplateAndBadOnesAreNamed) {
  // No template in the file: the built-in chatml, which writes calls as <tool_call> (hermes).
  test::ServerProcess server({"-m", kStories, "-c", "512"});
  EXPECT_THAT(server.log(), HasSubstr("tool calls read as hermes"));
  auto c = server.client();
  const std::string ask = R"({"messages": [{"role": "user", "content": "Rain?"}], "max_tokens": 3, "tools": )" +
                          std::string(kTools);
  Reply r = post(c, "/apply-template", ask + "}");
  ASSERT_EQ(r.status, 200) << r.body.dump();
  const std::string prompt = r.body["prompt"];
  // The tool is shown as tojson prints it, keys in the order the client sent them.
  EXPECT_THAT(prompt, HasSubstr("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
                                "\"description\": \"Weather of a city\", \"parameters\": {\"type\": \"object\""));
  r = post(c, "/apply-template", ask + R"(, "tool_choice": "none"})");
  EXPECT_THAT(r.body["prompt"].get<std::string>(), ::testing::Not(HasSubstr("<tools>")));  // "none": not shown

  // A reply in prose to a request with tools: a plain message.
  r = post(c, "/v1/chat/completions", ask + R"(, "tool_choice": "auto", "parallel_tool_calls": false})");
  ASSERT_EQ(r.status, 200) << r.body.dump();
  EXPECT_TRUE(r.body["choices"][0]["message"]["content"].is_string());
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "length");

  const std::vector<std::pair<std::string, std::string>> refused = {
      {ask + R"(, "tool_choice": {"type": "function", "function": {"name": "get_time"}}})", "tool_choice"},  // no such tool
      {ask + R"(, "tool_choice": {"type": "function", "name": "get_weather"}})", "tool_choice"},  // not OpenAI's shape
      {ask + R"(, "tool_choice": "required", "response_format": {"type": "json_object"}})", "tool_choice"},
      {ask + R"(, "tool_choice": "sometimes"})", "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "auto"})", "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "a b"}}]})",
       "tools[0].function.name"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f", "strict": true}}]})",
       "tools[0].function.strict"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "code_interpreter"}]})", "tools[0]"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": {}})", "tools"},
      {ask + R"(, "parallel_tool_calls": "yes"})", "parallel_tool_calls"},
  };
  for (const auto& [body, param] : refused) {
    r = post(c, "/v1/chat/completions", body);
    EXPECT_EQ(r.status, 400) << body;
    EXPECT_EQ(r.body["error"]["param"], param) << body << " -> " << r.body.dump();
  }

  // A server told not to read calls refuses tools rather than answering as if it could.
  test::ServerProcess no_parser({"-m", kStories, "-c", "512", "--tool-call-parser", "none"});
  auto c2 = no_parser.client();
  r = post(c2, "/v1/chat/completions", ask + "}");
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body["error"]["message"].get<std::string>(), HasSubstr("--tool-call-parser"));
}

TEST(ServerChatTemplate, ATemplateThatDoesNotParseStopsStartUpWithItsLine) {
  test::TempDir dir;
  test::write_bytes(dir.file("broken.jinja"), "{% for m in messages %}\n{{ m.content }\n");
  const auto r = test::run_kestrel({"serve", "-m", kStories, "--port", "0", "--chat-template", dir.file("broken.jinja")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("broken.jinja"));
  EXPECT_THAT(r.err, HasSubstr("line 2"));
  const auto bad_kwargs = test::run_kestrel({"serve", "-m", kStories, "--port", "0", "--chat-template-kwargs", "[1]"});
  EXPECT_NE(bad_kwargs.exit_code, 0);
  EXPECT_THAT(bad_kwargs.err, HasSubstr("--chat-template-kwargs must be a JSON object"));
}

const ojson kChat = {
    {"messages", {{{"role", "user"}, {"content", "Tell me a story"}}}}, {"max_tokens", 24}, {"temperature", 0}};

ojson chat(test::ServerProcess& s, ojson body) {
  auto c = s.client();
  auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
  return r ? ojson::parse(r->body) : ojson();
}

TEST(ServerReasoning, AnOpenThinkMakesTheReplyReasoningContentWholeAndStreamed) {
  test::ServerProcess plain({"-m", kStories, "-c", "256", "--chat-template", "deepseek-r1", "--reasoning-format", "none"});
  test::ServerProcess split({"-m", kStories, "-c", "256", "--chat-template", "deepseek-r1"});  // auto: the template thinks
  EXPECT_THAT(split.log(), ::testing::HasSubstr("reasoning split from content"));
  const ojson as_content = chat(plain, kChat)["choices"][0]["message"];
  const std::string text = as_content["content"];
  ASSERT_FALSE(text.empty());
  EXPECT_FALSE(as_content.contains("reasoning_content"));

  const ojson as_reasoning = chat(split, kChat)["choices"][0]["message"];
  // the same text, the whitespace around it trimmed as around a <think> block
  const size_t b = text.find_first_not_of(" \n"), e = text.find_last_not_of(" \n");
  EXPECT_EQ(as_reasoning["reasoning_content"], text.substr(b, e + 1 - b));
  EXPECT_EQ(as_reasoning["content"], "");

  // Streamed: reasoning deltas joined give the same text; no content delta carries text.
  ojson body = kChat;
  body["stream"] = true;
  auto c = split.client();
  auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  std::string reasoning, content;
  int reasoning_chunks = 0;
  for (size_t at = 0; (at = r->body.find("data: ", at)) != std::string::npos;) {
    const size_t end = r->body.find("\n\n", at);
    const std::string data = r->body.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]") break;
    const ojson delta = ojson::parse(data)["choices"][0]["delta"];
    if (delta.contains("reasoning_content")) {
      reasoning += delta["reasoning_content"].get<std::string>();
      reasoning_chunks++;
    }
    if (delta.contains("content")) content += delta["content"].get<std::string>();
  }
  EXPECT_EQ(reasoning, as_reasoning["reasoning_content"]);
  EXPECT_GT(reasoning_chunks, 3);  // token by token, not at the end
  EXPECT_EQ(content, "");
}

TEST(ServerReasoning, NoOpenThinkAndNoThinkTagLeavesTheReplyAsContent) {
  test::ServerProcess plain({"-m", kStories, "-c", "256", "--reasoning-format", "none"});
  test::ServerProcess split({"-m", kStories, "-c", "256", "--reasoning-format", "deepseek"});
  const ojson a = chat(plain, kChat)["choices"][0]["message"], b = chat(split, kChat)["choices"][0]["message"];
  EXPECT_EQ(a["content"], b["content"]);
  EXPECT_FALSE(b.contains("reasoning_content"));
}

}  // namespace
}  // namespace kestrel

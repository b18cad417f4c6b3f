// Chat templates through `kestrel serve`: the prompt a chat body renders to
// (POST /apply-template, llama.cpp's endpoint) for a Jinja template given
// with --chat-template FILE and switches from --chat-template-kwargs or the
// request; tool turns, the developer role; the template's own refusals as
// 400s carrying its words; a template that does not parse stops start-up.
#include <gmock/gmock.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "cli_process.h"
#include "serve_process.h"
#include "test_support.h"

namespace kestrel {
namespace {

using json = nlohmann::ordered_json;
using ::testing::HasSubstr;

const std::string kStories = test::shared("models/stories260K.gguf");

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
  json body;
};

Reply post(httplib::Client& c, const std::string& path, const std::string& body) {
  auto r = c.Post(path, body, "application/json");
  if (!r) {
    ADD_FAILURE() << "no response for " << body;
    return {};
  }
  return {r->status, json::parse(r->body, nullptr, false)};
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
  json with_kwargs = json::parse(convo);
  with_kwargs["chat_template_kwargs"] = {{"enable_thinking", true}};
  r = post(c, "/apply-template", with_kwargs.dump());
  ASSERT_EQ(r.status, 200) << r.body.dump();
  EXPECT_THAT(r.body["prompt"].get<std::string>(), ::testing::EndsWith("[for call_1]<assistant>"));

  // The same conversation generates.
  json completion = json::parse(convo);
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
  r = post(c, "/apply-template", R"({"messages": [{"role": "user", "content": "x"}], "temperature": 2})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["param"], "temperature");
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

}  // namespace
}  // namespace kestrel

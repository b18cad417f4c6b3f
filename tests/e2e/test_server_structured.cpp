// Structured output through `kestrel serve`: response_format json_schema and
// json_object, llama.cpp's `grammar`, streamed and whole, with n > 1 and with
// speculative decoding (drafts the grammar does not allow are rejected, and
// greedy output is the same as without drafting); tool_choice "required" and
// a named function always give calls with valid arguments; bad grammars and
// schemas are 400s naming the field and the keyword.
#include <gmock/gmock.h>
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <set>

#include "cli_process.h"
#include "http_json.h"
#include "prometheus_text.h"
#include "serve_process.h"
#include "test_support.h"

namespace kestrel {

using json = nlohmann::json;

namespace {
using ::testing::HasSubstr;

const json kSchema = json::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 12},
    "scores": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3},
    "mood": {"enum": ["happy", "sad", null]}
  },
  "required": ["name", "scores", "mood"],
  "additionalProperties": false})");

// The schema's shape, checked by hand (the corpus test runs the full validator).
void expect_shape(const std::string& text) {
  json v;
  ASSERT_NO_THROW(v = json::parse(text)) << text;
  ASSERT_TRUE(v.is_object()) << text;
  EXPECT_EQ(v.size(), 3u) << text;
  EXPECT_TRUE(v["name"].is_string()) << text;
  ASSERT_TRUE(v["scores"].is_array()) << text;
  EXPECT_GE(v["scores"].size(), 1u);
  EXPECT_LE(v["scores"].size(), 3u);
  for (const json& s : v["scores"]) EXPECT_TRUE(s.is_number_integer()) << text;
  EXPECT_TRUE(v["mood"] == "happy" || v["mood"] == "sad" || v["mood"].is_null()) << text;
}

std::string synth_model(const test::TempDir& dir) { return test::write_synth_stories_model(dir.file("synth.gguf")); }

json schema_chat(int seed, double temperature) {
  return {{"messages", {{{"role", "user"}, {"content", "Describe a player as JSON"}}}},
          {"max_tokens", 1500},
          {"seed", seed},
          {"temperature", temperature},
          {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "player"}, {"strict", true}, {"schema", kSchema}}}}}};
}

TEST(ServerStructured, SchemaAndJsonObjectAndGrammarHoldWholeStreamedAndPerChoice) {
  test::TempDir dir;
  test::ServerProcess server({"-m", synth_model(dir)});
  auto c = server.client();
  for (int seed = 1; seed <= 4; seed++) {
    const json r = test::post_ok(c, "/v1/chat/completions", schema_chat(seed, 1.0));
    EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
    expect_shape(r["choices"][0]["message"]["content"].get<std::string>());
  }
  // n = 3: each choice is held to the schema by its own matcher.
  json body = schema_chat(7, 1.0);
  body["n"] = 3;
  const json many = test::post_ok(c, "/v1/chat/completions", body);
  ASSERT_EQ(many["choices"].size(), 3u);
  for (const json& ch : many["choices"]) expect_shape(ch["message"]["content"].get<std::string>());

  // Streamed: the deltas add up to the same kind of answer.
  body = schema_chat(3, 1.0);
  body["stream"] = true;
  auto res = c.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  std::string text, finish;
  for (const std::string& line : test::sse_data_lines(res->body)) {
    if (line == "[DONE]") break;
    const json chunk = json::parse(line);
    for (const json& ch : chunk["choices"]) {
      if (ch["delta"].contains("content") && ch["delta"]["content"].is_string()) text += ch["delta"]["content"].get<std::string>();
      if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
    }
  }
  EXPECT_EQ(finish, "stop");
  expect_shape(text);
  EXPECT_EQ(text, test::post_ok(c, "/v1/chat/completions", schema_chat(3, 1.0))["choices"][0]["message"]["content"]);

  // json_object: any object.
  const json obj = test::post_ok(c, "/v1/chat/completions",
                                 {{"messages", {{{"role", "user"}, {"content", "JSON please"}}}},
                                  {"max_tokens", 1500}, {"seed", 5}, {"logit_bias", {{"128", 8}}},  // '}' ends it sooner
                                  {"response_format", {{"type", "json_object"}}}});
  EXPECT_TRUE(json::parse(obj["choices"][0]["message"]["content"].get<std::string>()).is_object());

  // llama.cpp's grammar field, on completions.
  const json g = test::post_ok(c, "/v1/completions",
                               {{"prompt", "The answer is"}, {"max_tokens", 50}, {"seed", 2}, {"temperature", 1.0},
                                {"grammar", "root ::= (\" yes\" | \" no\") (\", \" [0-9]{1,3})? \".\""}});
  EXPECT_THAT(g["choices"][0]["text"].get<std::string>(), ::testing::MatchesRegex("^ (yes|no)(, [0-9]{1,3})?\\.$"));
  EXPECT_EQ(g["choices"][0]["finish_reason"], "stop");

  // The grammar's share shows in /metrics: 4 + 3 + 2 (streamed, then whole) + 1 + 1 requests.
  const auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  const test::PrometheusText metrics = test::parse_prometheus(m->body);
  EXPECT_EQ(metrics.get("kestrel_grammar_requests_total"), 11);
  EXPECT_GE(metrics.get("kestrel_grammar_masks_total"), metrics.get("kestrel_generation_tokens_total"));
  EXPECT_GT(metrics.get("kestrel_grammar_mask_seconds_total"), 0);
}

TEST(ServerStructured, DraftsAreCheckedAgainstTheGrammarAndGreedyTextIsUnchanged) {
  test::TempDir dir;
  const std::string model = synth_model(dir);
  test::ServerProcess plain({"-m", model});
  test::ServerProcess spec({"-m", model, "--spec", "ngram"});
  auto a = plain.client();
  auto b = spec.client();
  for (int seed = 1; seed <= 3; seed++) {
    json body = schema_chat(seed, 0.0);
    body["messages"][0]["content"] = fmt::format("Player {} as JSON", seed);
    const json want = test::post_ok(a, "/v1/chat/completions", body);
    const json got = test::post_ok(b, "/v1/chat/completions", body);
    EXPECT_EQ(got["choices"][0]["message"]["content"], want["choices"][0]["message"]["content"]) << seed;
    expect_shape(got["choices"][0]["message"]["content"].get<std::string>());
  }
  // Drafting happened (n-grams of the JSON repeat).
  const auto m = b.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_GT(test::parse_prometheus(m->body).get("kestrel_spec_drafted_tokens_total"), 0);
}

// tool_choice "required" / a named function: the reply is calls, always, in
// the template's format (chatml: hermes), with arguments of the tool's schema.
TEST(ServerStructured, RequiredAndNamedToolChoiceAlwaysCallWithValidArguments) {
  test::TempDir dir;
  test::ServerProcess server({"-m", synth_model(dir)});
  auto c = server.client();
  const json tools = json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "strict": true, "parameters": {"type": "object",
      "properties": {"city": {"type": "string", "maxLength": 20}, "unit": {"enum": ["celsius", "fahrenheit"]}},
      "required": ["city", "unit"], "additionalProperties": false}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
      "properties": {"zone": {"type": "integer"}}, "required": ["zone"], "additionalProperties": false}}}])");
  auto ask = [&](const json& choice, bool parallel, int seed) {
    return json{{"messages", {{{"role", "user"}, {"content", "Weather or time?"}}}}, {"max_tokens", 1000}, {"seed", seed},
                {"temperature", 1.0}, {"tools", tools}, {"tool_choice", choice}, {"parallel_tool_calls", parallel}};
  };
  auto check_call = [](const json& call) {
    EXPECT_EQ(call["type"], "function");
    const std::string name = call["function"]["name"];
    const json args = json::parse(call["function"]["arguments"].get<std::string>());
    if (name == "get_weather") {
      EXPECT_TRUE(args["city"].is_string());
      EXPECT_TRUE(args["unit"] == "celsius" || args["unit"] == "fahrenheit") << args;
      EXPECT_EQ(args.size(), 2u);
    } else {
      EXPECT_EQ(name, "get_time");
      EXPECT_TRUE(args["zone"].is_number_integer()) << args;
      EXPECT_EQ(args.size(), 1u);
    }
    return name;
  };
  std::set<std::string> names;
  for (int seed = 1; seed <= 6; seed++) {
    const json r = test::post_ok(c, "/v1/chat/completions", ask("required", false, seed));
    const json& m = r["choices"][0]["message"];
    EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls") << r;
    ASSERT_EQ(m["tool_calls"].size(), 1u) << r;  // parallel_tool_calls false: one
    names.insert(check_call(m["tool_calls"][0]));
  }
  EXPECT_EQ(names.size(), 2u);  // either tool may be called
  for (int seed = 1; seed <= 4; seed++) {
    const json r = test::post_ok(c, "/v1/chat/completions",
                                 ask({{"type", "function"}, {"function", {{"name", "get_time"}}}}, true, seed));
    EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls") << r;
    ASSERT_GE(r["choices"][0]["message"]["tool_calls"].size(), 1u) << r;
    for (const json& call : r["choices"][0]["message"]["tool_calls"]) EXPECT_EQ(check_call(call), "get_time");
  }
  // Streamed: the call arrives as delta.tool_calls.
  json body = ask("required", false, 3);
  body["stream"] = true;
  auto res = c.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  std::string name, args, finish;
  for (const std::string& line : test::sse_data_lines(res->body)) {
    if (line == "[DONE]") break;
    const json chunk = json::parse(line);  // (kept: a range-for over a temporary's member would dangle)
    for (const json& ch : chunk["choices"]) {
      if (ch["delta"].contains("tool_calls"))
        for (const json& tc : ch["delta"]["tool_calls"]) {
          if (tc["function"].contains("name")) name += tc["function"]["name"].get<std::string>();
          if (tc["function"].contains("arguments")) args += tc["function"]["arguments"].get<std::string>();
        }
      if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
    }
  }
  EXPECT_EQ(finish, "tool_calls");
  check_call({{"type", "function"}, {"function", {{"name", name}, {"arguments", args}}}});
}

TEST(ServerStructured, BadGrammarsAndSchemasAre400sNamingFieldAndKeyword) {
  test::ServerProcess server({"-m", test::shared("models/stories260K.gguf")});
  auto c = server.client();
  auto expect_400 = [&](const std::string& path, const json& body, const std::string& param, const std::string& words) {
    auto r = c.Post(path, body.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body;
    const json e = json::parse(r->body)["error"];
    EXPECT_EQ(e["param"], param) << r->body;
    EXPECT_THAT(e["message"].get<std::string>(), HasSubstr(words));
  };
  const json msgs = {{{"role", "user"}, {"content", "hi"}}};
  expect_400("/v1/completions", {{"prompt", "x"}, {"grammar", "root ::= item"}}, "grammar", "'item' is used but never defined");
  expect_400("/v1/completions", {{"prompt", "x"}, {"grammar", "root ::= root \"a\" | \"b\""}}, "grammar", "left recursion");
  expect_400("/v1/completions", {{"prompt", "x"}, {"grammar", 5}}, "grammar", "must be a string");
  expect_400("/v1/chat/completions",
             {{"messages", msgs},
              {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", {{"type", "string"}, {"pattern", "^a"}}}}}}}},
             "response_format.json_schema.schema", "keyword 'pattern'");
  expect_400("/v1/chat/completions",
             {{"messages", msgs},
              {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", {{"type", "object"}}}, {"strictly", true}}}}}},
             "response_format.json_schema.strictly", "unknown field");
  expect_400("/v1/chat/completions", {{"messages", msgs}, {"response_format", {{"type", "yaml"}}}}, "response_format.type", "\"yaml\"");
  expect_400("/v1/chat/completions",
             {{"messages", msgs}, {"response_format", {{"type", "json_object"}}}, {"grammar", "root ::= \"a\""}}, "grammar",
             "not both");
  // And the server goes on serving.
  const json ok = test::post_ok(c, "/v1/chat/completions",
                                {{"messages", msgs}, {"max_tokens", 30}, {"response_format", {{"type", "text"}}}});
  EXPECT_EQ(ok["object"], "chat.completion");
}

}  // namespace
}  // namespace kestrel

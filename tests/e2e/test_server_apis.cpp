// The other APIs a generation is asked through, with their stock clients: Anthropic's Messages
// (@anthropic-ai/sdk), OpenAI's Responses (openai) and Ollama's API (ollama), and their wire formats, and
// llama-server's /infill checked directly (event order, error shapes, token counting,
// the endpoint label on the metrics). The model: a tiny Qwen3.5 (a reasoning template with a tool-call format,
// tests/compat) with the real Qwen3.5 chat template.
#include <gmock/gmock.h>
#include <httplib.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli_process.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "http_json.h"
#include "serve_process.h"
#include "test_support.h"

namespace kestrel {

using json = nlohmann::json;

namespace {
using ::testing::HasSubstr;

const std::string kClients = std::string(KESTREL_SOURCE_DIR) + "/tests/e2e/openai_client";

// A tiny qwen35 with a DeepSeek vocabulary (its template's markers are text there), written once.
const std::string& tiny_qwen35() {
  static const std::string path = [] {
    const std::string p = std::filesystem::temp_directory_path() / ("kestrel-apis-qwen35-" + std::to_string(getpid()) + ".gguf");
    const auto made = test::run_kestrel({"synth", "--arch", "qwen35", "--preset", "tiny", "--type", "f32", "--vocab-from",
                                         test::shared("vocab/ggml-vocab-deepseek-llm.gguf"), "-o", p});
    EXPECT_EQ(made.exit_code, 0) << made.err;
    std::atexit([] { std::filesystem::remove(std::filesystem::temp_directory_path() /
                                             ("kestrel-apis-qwen35-" + std::to_string(getpid()) + ".gguf")); });
    return p;
  }();
  return path;
}

std::vector<std::string> server_args(std::vector<std::string> more = {}) {
  std::vector<std::string> a = {"-m", tiny_qwen35(), "-c", "4096", "--chat-template",
                                test::shared("templates/Qwen3.5-4B.jinja"), "--served-model-name", "tiny"};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

// Server-sent events as (event, data) pairs.
std::vector<std::pair<std::string, json>> sse_events(const std::string& body) {
  std::vector<std::pair<std::string, json>> out;
  size_t at = 0;
  for (size_t end; (end = body.find("\n\n", at)) != std::string::npos; at = end + 2) {
    const std::string ev = body.substr(at, end - at);
    const size_t nl = ev.find('\n');
    if (ev.rfind("event: ", 0) != 0 || nl == std::string::npos) continue;
    out.emplace_back(ev.substr(7, nl - 7), json::parse(ev.substr(nl + 1 + 6)));
  }
  return out;
}

// Prompt caching as Claude Code asks for it (cache_control on the system prompt and the last user block):
// the first request writes the marked prefix (cache_creation_input_tokens), the same request again reads it
// (cache_read_input_tokens), and the three counts always add up to the prompt, as in Anthropic's API. The
// marked prefix is pinned in the RAM tier for its TTL.
TEST(AnthropicMessages, CacheControlReportsCreationAndReadsAndPinsThePrefix) {
  test::ServerProcess s(server_args({"--api-key", "secret"}));
  int st = 0;
  const std::string out = test::shell("cd " + kClients + " && KESTREL_URL=http://127.0.0.1:" + std::to_string(s.port()) +
                                          " KESTREL_KEY=secret node anthropic_cache.mjs",
                                      &st);
  ASSERT_EQ(st, 0) << out;
  const json seen = json::parse(out.substr(out.rfind("\n{") == std::string::npos ? 0 : out.rfind("\n{") + 1));
  const int64_t prompt = seen["count"];
  ASSERT_GT(prompt, 300) << seen;
  auto total = [](const json& u) {
    return u["input_tokens"].get<int64_t>() + u["cache_creation_input_tokens"].get<int64_t>() +
           u["cache_read_input_tokens"].get<int64_t>();
  };
  const json& first = seen["first"];
  EXPECT_EQ(total(first), prompt) << first;
  EXPECT_EQ(first["cache_read_input_tokens"], 0) << first;
  // The last breakpoint is the last user block: all of the prompt but the generation prompt's few tokens.
  EXPECT_GT(first["cache_creation_input_tokens"].get<int64_t>(), prompt - 16) << first;
  for (const char* again : {"second", "streamed"}) {
    const json& u = seen[again];
    EXPECT_EQ(total(u), prompt) << again << " " << u;
    EXPECT_GE(u["cache_read_input_tokens"].get<int64_t>(), prompt - 16) << again << " " << u;  // whole blocks
    EXPECT_LT(u["cache_creation_input_tokens"].get<int64_t>(), 16) << again << " " << u;
    EXPECT_EQ(u["output_tokens"], first["output_tokens"]);
  }
  // One turn longer: the earlier turn's prefix is read (up to where the template renders a past assistant turn
  // otherwise than the generation prompt), the new turn's part written.
  const json& next = seen["next_turn"];
  EXPECT_GE(next["cache_read_input_tokens"].get<int64_t>(), prompt - 64) << next;
  EXPECT_GT(next["cache_creation_input_tokens"].get<int64_t>(), 0) << next;
  EXPECT_EQ(seen["bad_ttl"]["status"], 400) << seen;
  EXPECT_THAT(seen["bad_ttl"]["message"].get<std::string>(), HasSubstr("system[0].cache_control.ttl"));
  // The marked prefixes are pinned (in the RAM tier, once they leave the pool).
  auto c = s.client();
  c.set_bearer_token_auth("secret");
  const auto cache = c.Get("/cache");
  ASSERT_TRUE(cache && cache->status == 200);
  EXPECT_TRUE(json::parse(cache->body)["ram"]["enabled"].get<bool>());
}

TEST(AnthropicMessages, CacheControlIsCheckedLikeAnthropicChecksIt) {
  test::ServerProcess s(server_args());
  auto c = s.client();
  auto post = [&](const json& body) { return c.Post("/v1/messages", body.dump(), "application/json"); };
  const json block = {{"type", "text"}, {"text", "Hi"}, {"cache_control", {{"type", "ephemeral"}}}};
  json body = {{"model", "tiny"}, {"max_tokens", 2}, {"messages", {{{"role", "user"}, {"content", {block, block, block, block, block}}}}}};
  auto r = post(body);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, HasSubstr("at most 4 blocks may have 'cache_control'"));
  body["messages"][0]["content"] = {{{"type", "text"}, {"text", "Hi"}, {"cache_control", {{"type", "persistent"}}}}};
  r = post(body);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, HasSubstr("messages[0].content[0].cache_control"));
  body["messages"][0]["content"] = {{{"type", "text"}, {"text", "Hi"}, {"cache_control", {{"type", "ephemeral"}, {"scope", "x"}}}}};
  r = post(body);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, HasSubstr("scope"));
  // A breakpoint on a tool: the prefix before the first message (the system prompt and the tools).
  body["messages"][0]["content"] = "Hi";
  body["system"] = "You are terse.";
  body["tools"] = {{{"name", "f"}, {"input_schema", {{"type", "object"}}}, {"cache_control", {{"type", "ephemeral"}}}}};
  r = post(body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json u = json::parse(r->body)["usage"];
  EXPECT_GT(u["cache_creation_input_tokens"].get<int64_t>(), 0) << u;
  EXPECT_GT(u["input_tokens"].get<int64_t>(), 0) << u;  // the message after the breakpoint
}

TEST(AnthropicMessages, TheOfficialClientWholeStreamedToolUseAndThinking) {
  ASSERT_TRUE(std::filesystem::exists(kClients + "/node_modules/@anthropic-ai/sdk/package.json"))
      << "the @anthropic-ai/sdk npm package is missing: run scripts/setup.sh";
  test::ServerProcess s(server_args({"--api-key", "secret"}));
  int st = 0;
  const std::string out = test::shell("cd " + kClients + " && KESTREL_URL=http://127.0.0.1:" + std::to_string(s.port()) +
                                          " KESTREL_KEY=secret node anthropic.mjs",
                                      &st);
  ASSERT_EQ(st, 0) << out;
  const json seen = json::parse(out.substr(out.rfind("\n{") == std::string::npos ? 0 : out.rfind("\n{") + 1));
  EXPECT_EQ(seen["message"]["type"], "message");
  EXPECT_EQ(seen["message"]["role"], "assistant");
  EXPECT_EQ(seen["message"]["stop"], "max_tokens");
  EXPECT_EQ(seen["message"]["blocks"], json::array({"text"}));
  EXPECT_EQ(seen["message"]["usage"]["output_tokens"], 6);
  // count_tokens says what the message's prompt held.
  EXPECT_EQ(seen["count"]["input_tokens"], seen["message"]["usage"]["input_tokens"]);
  EXPECT_GT(seen["count"]["input_tokens"].get<int>(), 5);
  // Streamed: the same text (greedy), in Anthropic's event order.
  EXPECT_EQ(seen["stream"]["text"], seen["message"]["text"]);
  EXPECT_EQ(seen["stream"]["output_tokens"], 6);
  const json& ev = seen["stream"]["events"];
  ASSERT_GE(ev.size(), 6u) << ev;
  EXPECT_EQ(ev[0], "message_start");
  EXPECT_EQ(ev[1], "content_block_start");
  EXPECT_EQ(ev[2], "content_block_delta:text_delta");
  EXPECT_EQ(ev[ev.size() - 3], "content_block_stop");
  EXPECT_EQ(ev[ev.size() - 2], "message_delta");
  EXPECT_EQ(ev[ev.size() - 1], "message_stop");
  // Tool use: forced (any), read back as a tool_use block with its input, whole and streamed.
  EXPECT_EQ(seen["call"]["stop"], "tool_use") << seen;
  EXPECT_EQ(seen["call"]["name"], "get_weather");
  ASSERT_TRUE(seen["call"]["input"].is_object()) << seen;
  EXPECT_TRUE(seen["call"]["input"]["city"] == "Paris" || seen["call"]["input"]["city"] == "Lyon") << seen;
  EXPECT_TRUE(seen["call"]["input"]["metric"].is_boolean()) << seen;
  EXPECT_EQ(seen["stream_call"]["stop"], "tool_use");
  EXPECT_EQ(seen["stream_call"]["input"], seen["call"]["input"]);
  EXPECT_GE(seen["stream_call"]["deltas"], 1);
  EXPECT_GE(seen["answer"]["tokens"], 1);  // the tool result went back through the template
  // Thinking on: Qwen3.5's template opens <think>; the reply is a thinking block, streamed as thinking_delta,
  // closed at budget_tokens (1024 of max_tokens 1100: a random model does not close it itself), then text.
  EXPECT_EQ(seen["thinking"]["blocks"], json::array({"thinking", "text"})) << seen["thinking"];
  EXPECT_GT(seen["thinking"]["chars"], 0);
  EXPECT_GT(seen["thinking"]["deltas"], 0);
  // Errors: Anthropic's shape, the SDK's typed errors; the key is checked as x-api-key.
  EXPECT_EQ(seen["image"]["status"], 400);
  EXPECT_EQ(seen["image"]["type"], "invalid_request_error");
  EXPECT_THAT(seen["image"]["message"].get<std::string>(), HasSubstr("image"));
  EXPECT_THAT(seen["unknown"]["message"].get<std::string>(), HasSubstr("mcp_servers"));
  EXPECT_THAT(seen["no_max"]["message"].get<std::string>(), HasSubstr("max_tokens"));
  EXPECT_EQ(seen["wrong_key"]["status"], 401);
  EXPECT_EQ(seen["wrong_key"]["name"], "AuthenticationError");
  EXPECT_EQ(seen["wrong_key"]["type"], "authentication_error");
}

// reasoning_budget (chat; Anthropic's thinking.budget_tokens maps to it): after that many reasoning tokens the
// template's close tag is generated in place of the sampled tokens, and the answer follows.
TEST(ReasoningBudget, TheCloseTagComesAfterTheBudget) {
  test::ServerProcess s(server_args());
  auto c = s.client();
  const json ask = {{"messages", {{{"role", "user"}, {"content", "Think"}}}}, {"max_tokens", 24}, {"temperature", 0},
                    {"logprobs", true}, {"return_tokens_as_token_ids", true}, {"ignore_eos", true}};
  const json free_run = test::post_ok(c, "/v1/chat/completions", ask);
  json budget = ask;
  budget["reasoning_budget"] = 6;
  const json cut = test::post_ok(c, "/v1/chat/completions", budget);
  auto ids = [](const json& r) {
    std::vector<int> out;
    for (const auto& t : r["choices"][0]["logprobs"]["content"]) out.push_back(std::stoi(t["token"].get<std::string>().substr(9)));
    return out;
  };
  const std::vector<int> a = ids(free_run), b = ids(cut);
  ASSERT_EQ(a.size(), 24u);
  ASSERT_EQ(b.size(), 24u);
  // The first 6 tokens as without a budget; then "</think>"'s tokens (a random model had not closed it).
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + 6, b.begin()));
  const json close = test::post_ok(c, "/tokenize", {{"content", "</think>"}, {"add_special", false}});
  const auto tag = close["tokens"].get<std::vector<int>>();
  ASSERT_FALSE(tag.empty());
  EXPECT_TRUE(std::equal(tag.begin(), tag.end(), b.begin() + 6)) << cut;
  EXPECT_FALSE(free_run["choices"][0]["message"].contains("content") &&
               free_run["choices"][0]["message"]["content"].is_string() &&
               !free_run["choices"][0]["message"]["content"].get<std::string>().empty());
  EXPECT_FALSE(cut["choices"][0]["message"]["reasoning_content"].get<std::string>().empty());
  EXPECT_FALSE(cut["choices"][0]["message"]["content"].get<std::string>().empty()) << cut;  // the answer after it
  // Refused where it would change nothing or break a grammar.
  json with_grammar = budget;
  with_grammar["response_format"] = {{"type", "json_object"}};
  auto r = c.Post("/v1/chat/completions", with_grammar.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, HasSubstr("reasoning_budget"));
}

TEST(AnthropicMessages, WireFormatStopSequencesToolResultsAndMetrics) {
  test::ServerProcess s(server_args());
  auto c = s.client();
  // The raw stream: message_start with the prompt's size, a ping, blocks, message_delta with usage, message_stop.
  const json body = {{"model", "tiny"}, {"max_tokens", 5}, {"stream", true}, {"thinking", {{"type", "disabled"}}},
                     {"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  auto r = c.Post("/v1/messages", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const auto events = sse_events(r->body);
  ASSERT_GE(events.size(), 6u) << r->body;
  EXPECT_EQ(events[0].first, "message_start");
  EXPECT_GT(events[0].second["message"]["usage"]["input_tokens"].get<int>(), 3);
  EXPECT_EQ(events[1].first, "ping");
  for (const auto& [name, data] : events) EXPECT_EQ(data["type"], name);  // each event names its data's type
  EXPECT_EQ(events[events.size() - 2].second["delta"]["stop_reason"], "max_tokens");
  EXPECT_EQ(events[events.size() - 2].second["usage"]["output_tokens"], 5);

  // A stop sequence: stop_reason "stop_sequence" naming it. The whole text of a longer reply gives one that occurs.
  const json longer = test::post_ok(c, "/v1/messages", {{"max_tokens", 12}, {"thinking", {{"type", "disabled"}}}, {"temperature", 0},
                                                        {"messages", {{{"role", "user"}, {"content", "Hi"}}}}});
  const std::string text = longer["content"][0]["text"];
  size_t at = text.size() / 3;  // two ASCII letters past the start
  while (at + 1 < text.size() && !(std::isalpha(static_cast<unsigned char>(text[at])) &&
                                   std::isalpha(static_cast<unsigned char>(text[at + 1]))))
    at++;
  ASSERT_LT(at + 1, text.size()) << text;
  const std::string stop = text.substr(at, 2);
  const json stopped = test::post_ok(c, "/v1/messages", {{"max_tokens", 12}, {"thinking", {{"type", "disabled"}}}, {"temperature", 0},
                                                         {"stop_sequences", {stop}},
                                                         {"messages", {{{"role", "user"}, {"content", "Hi"}}}}});
  EXPECT_EQ(stopped["stop_reason"], "stop_sequence") << stopped;
  EXPECT_EQ(stopped["stop_sequence"], stop);
  EXPECT_EQ(stopped["content"][0]["text"], text.substr(0, text.find(stop)));

  // A conversation with tool_use / tool_result blocks renders as the template renders OpenAI's tool turns:
  // the same prompt size through both APIs.
  const json anthropic_turns = {
      {"system", {{{"type", "text"}, {"text", "Be brief."}}}},
      {"tools", {{{"name", "get_weather"}, {"description", "Weather"}, {"input_schema", {{"type", "object"}}}}}},
      {"thinking", {{"type", "disabled"}}},
      {"messages",
       {{{"role", "user"}, {"content", "Weather?"}},
        {{"role", "assistant"},
         {"content", {{{"type", "tool_use"}, {"id", "t1"}, {"name", "get_weather"}, {"input", {{"city", "Paris"}}}}}}},
        {{"role", "user"}, {"content", {{{"type", "tool_result"}, {"tool_use_id", "t1"}, {"content", "18 C"}}}}}}}};
  const json openai_turns = {
      {"tools", {{{"type", "function"}, {"function", {{"name", "get_weather"}, {"description", "Weather"},
                                                      {"parameters", {{"type", "object"}}}}}}}},
      {"chat_template_kwargs", {{"enable_thinking", false}}},
      {"messages",
       {{{"role", "system"}, {"content", "Be brief."}},
        {{"role", "user"}, {"content", "Weather?"}},
        {{"role", "assistant"}, {"content", nullptr},
         {"tool_calls", {{{"id", "t1"}, {"type", "function"},
                          {"function", {{"name", "get_weather"}, {"arguments", R"({"city":"Paris"})"}}}}}}},
        {{"role", "tool"}, {"tool_call_id", "t1"}, {"content", "18 C"}}}}};
  const json a = test::post_ok(c, "/v1/messages/count_tokens", anthropic_turns);
  const json o = test::post_ok(c, "/v1/chat/completions/input_tokens", openai_turns);
  EXPECT_EQ(a["input_tokens"], o["input_tokens"]);
  EXPECT_GT(a["input_tokens"].get<int>(), 20);

  // Errors name the Anthropic field, in Anthropic's shape.
  r = c.Post("/v1/messages", R"({"max_tokens": 4, "messages": [{"role": "user", "content": "x"}], "temperature": 1.5})",
             "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  const json err = json::parse(r->body);
  EXPECT_EQ(err["type"], "error");
  EXPECT_EQ(err["error"]["type"], "invalid_request_error");
  EXPECT_THAT(err["error"]["message"].get<std::string>(), HasSubstr("temperature"));
  r = c.Post("/v1/messages",
             R"({"max_tokens": 4, "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "web_search_20250305", "name": "web_search"}]})",
             "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, HasSubstr("tools[0].type"));
  r = c.Post("/v1/messages", R"({"max_tokens": 4, "messages": [{"role": "user", "content": "x"}], "thinking": {"type": "enabled", "budget_tokens": 10}})",
             "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, HasSubstr("budget_tokens"));

  // Each API counted under its endpoint.
  r = c.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_THAT(r->body, HasSubstr("kestrel_api_requests_total{model_name="));
  EXPECT_THAT(r->body, HasSubstr("endpoint=\"/v1/messages\"} 6"));
}

TEST(OpenAiResponses, TheOfficialClientWholeStreamedToolsStoreAndStructured) {
  ASSERT_TRUE(std::filesystem::exists(kClients + "/node_modules/openai/package.json"))
      << "the openai npm package is missing: run scripts/setup.sh";
  test::ServerProcess s(server_args({"--responses-store", "4"}));
  int st = 0;
  const std::string out = test::shell(
      "cd " + kClients + " && KESTREL_URL=http://127.0.0.1:" + std::to_string(s.port()) + "/v1 node responses.mjs", &st);
  ASSERT_EQ(st, 0) << out;
  const json seen = json::parse(out.substr(out.rfind("\n{") == std::string::npos ? 0 : out.rfind("\n{") + 1));
  // Qwen3.5 thinks by default: the reply is a reasoning item, cut by max_output_tokens (incomplete).
  EXPECT_EQ(seen["first"]["object"], "response");
  EXPECT_EQ(seen["first"]["status"], "incomplete");
  EXPECT_EQ(seen["first"]["incomplete"]["reason"], "max_output_tokens");
  EXPECT_EQ(seen["first"]["types"], json::array({"reasoning"}));
  EXPECT_EQ(seen["first"]["usage"]["output_tokens"], 6);
  EXPECT_EQ(seen["first"]["usage"]["output_tokens_details"]["reasoning_tokens"], 6);
  // Streamed: the same reasoning, in the Responses event order.
  EXPECT_EQ(seen["stream"]["reasoning"], seen["first"]["reasoning"]);
  const json& ev = seen["stream"]["events"];
  ASSERT_GE(ev.size(), 8u) << ev;
  EXPECT_EQ(ev[0], "response.created");
  EXPECT_EQ(ev[2], "response.output_item.added");
  EXPECT_EQ(ev[4], "response.reasoning_text.delta");
  EXPECT_EQ(ev[ev.size() - 2], "response.output_item.done");
  EXPECT_EQ(ev[ev.size() - 1], "response.incomplete");
  // previous_response_id: the earlier turn (and its answer) come first, from the prefix cache.
  EXPECT_GT(seen["continued"]["input_tokens"].get<int>(), seen["continued"]["first_input_tokens"].get<int>());
  EXPECT_GE(seen["continued"]["cached"].get<int>(), 16);
  EXPECT_EQ(seen["retrieved"], seen["continued"]["previous"]);
  // A forced call as a function_call item, whole and streamed; its output continues the conversation.
  EXPECT_EQ(seen["call"]["status"], "completed") << seen;
  EXPECT_EQ(seen["call"]["metadata"]["test"], "tools");
  EXPECT_EQ(seen["call"]["name"], "get_weather");
  EXPECT_TRUE(seen["call"]["args"]["city"] == "Paris" || seen["call"]["args"]["city"] == "Lyon") << seen;
  EXPECT_EQ(seen["stream_call"]["args"], seen["call"]["args"]);
  EXPECT_TRUE(seen["stream_call"]["added"]);
  EXPECT_TRUE(seen["stream_call"]["done"]);
  EXPECT_EQ(seen["answer"]["output_tokens"], 4);
  // text.format json_schema: the output text parses to the schema.
  const json structured = json::parse(seen["structured"]["text"].get<std::string>());
  EXPECT_TRUE(structured["raining"].is_boolean()) << structured;
  // store: false keeps nothing (a 404 naming the id); built-in tools are refused by name.
  EXPECT_EQ(seen["unstored"]["status"], 404);
  EXPECT_THAT(seen["unstored"]["message"].get<std::string>(), HasSubstr("resp_"));
  EXPECT_EQ(seen["builtin"]["status"], 400);
  EXPECT_EQ(seen["builtin"]["param"], "tools[0].type");
}

TEST(OpenAiResponses, TheStoreIsBoundedAndInputItemsRenderAsChatTurns) {
  test::ServerProcess s(server_args({"--responses-store", "2"}));
  auto c = s.client();
  auto create = [&](const json& body, int* status = nullptr) {
    auto r = c.Post("/v1/responses", body.dump(), "application/json");
    EXPECT_TRUE(r);
    if (status) *status = r->status;
    return json::parse(r->body);
  };
  const json off = {{"effort", "none"}};
  std::vector<std::string> ids;
  for (int i = 0; i < 3; i++)
    ids.push_back(create({{"input", "Hi"}, {"max_output_tokens", 2}, {"reasoning", off}})["id"]);
  int status = 0;
  const json evicted = create({{"input", "Again"}, {"previous_response_id", ids[0]}, {"max_output_tokens", 2}}, &status);
  EXPECT_EQ(status, 404);
  EXPECT_THAT(evicted["error"]["message"].get<std::string>(), HasSubstr(ids[0]));
  EXPECT_THAT(evicted["error"]["message"].get<std::string>(), HasSubstr("last 2"));
  create({{"input", "Again"}, {"previous_response_id", ids[2]}, {"max_output_tokens", 2}, {"reasoning", off}}, &status);
  EXPECT_EQ(status, 200);
  // (that answer was stored too: the store of 2 now holds ids[2] and it)
  auto got = c.Get("/v1/responses/" + ids[2]);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, 200);
  EXPECT_EQ(json::parse(got->body)["id"], ids[2]);
  got = c.Get("/v1/responses/" + ids[1]);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, 404);

  // Items (a call, its output, an assistant message) render as the chat API's turns: the same prompt size.
  const json items = {
      {"instructions", "Be brief."},
      {"reasoning", off},
      {"max_output_tokens", 1},
      {"input",
       {{{"role", "user"}, {"content", "Weather?"}},
        {{"type", "function_call"}, {"call_id", "c1"}, {"name", "get_weather"}, {"arguments", R"({"city":"Paris"})"}},
        {{"type", "function_call_output"}, {"call_id", "c1"}, {"output", "18 C"}},
        {{"role", "assistant"}, {"content", {{{"type", "output_text"}, {"text", "Sunny."}}}}},
        {{"role", "user"}, {"content", {{{"type", "input_text"}, {"text", "Thanks"}}}}}}},
      {"tools", {{{"type", "function"}, {"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}}};
  const json turns = {
      {"chat_template_kwargs", {{"enable_thinking", false}}},
      {"tools", {{{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}}}},
      {"messages",
       {{{"role", "system"}, {"content", "Be brief."}},
        {{"role", "user"}, {"content", "Weather?"}},
        {{"role", "assistant"}, {"content", nullptr},
         {"tool_calls", {{{"id", "c1"}, {"type", "function"},
                          {"function", {{"name", "get_weather"}, {"arguments", R"({"city":"Paris"})"}}}}}}},
        {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "18 C"}},
        {{"role", "assistant"}, {"content", "Sunny."}},
        {{"role", "user"}, {"content", "Thanks"}}}}};
  EXPECT_EQ(create(items)["usage"]["input_tokens"], test::post_ok(c, "/v1/chat/completions/input_tokens", turns)["input_tokens"]);
  // Unknown fields and unsupported choices are refused by name.
  const json unknown = create({{"input", "x"}, {"background", true}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(unknown["error"]["param"], "background");
  create({{"input", "x"}, {"truncation", "auto"}}, &status);
  EXPECT_EQ(status, 400);
  create({{"input", {{{"role", "user"}, {"content", {{{"type", "input_image"}, {"image_url", "x"}}}}}}}}, &status);
  EXPECT_EQ(status, 400);
}

TEST(Ollama, TheOfficialClientListingsChatGenerateFormatToolsAndThinking) {
  ASSERT_TRUE(std::filesystem::exists(kClients + "/node_modules/ollama/package.json"))
      << "the ollama npm package is missing: run scripts/setup.sh";
  test::ServerProcess s(server_args({"--pooling", "last"}));
  int st = 0;
  const std::string out =
      test::shell("cd " + kClients + " && KESTREL_URL=http://127.0.0.1:" + std::to_string(s.port()) + " node ollama.mjs", &st);
  ASSERT_EQ(st, 0) << out;
  const json seen = json::parse(out.substr(out.rfind("\n{") == std::string::npos ? 0 : out.rfind("\n{") + 1));
  // The listings clients probe: the served name with Ollama's tag, the file's family, the template's abilities.
  EXPECT_FALSE(seen["version"]["version"].get<std::string>().empty());
  ASSERT_EQ(seen["list"].size(), 1u);
  EXPECT_EQ(seen["list"][0]["name"], "tiny:latest");
  EXPECT_EQ(seen["list"][0]["family"], "qwen35");
  EXPECT_EQ(seen["list"][0]["size"], std::filesystem::file_size(tiny_qwen35()));
  EXPECT_EQ(seen["ps"], json::array({"tiny:latest"}));
  EXPECT_EQ(seen["show"]["capabilities"], json::array({"completion", "tools", "thinking"}));
  EXPECT_GT(seen["show"]["template"], 1000);
  // Chat, whole and streamed (NDJSON): the same greedy text, num_predict tokens, done with the counts.
  EXPECT_EQ(seen["chat"]["role"], "assistant");
  EXPECT_TRUE(seen["chat"]["done"]);
  EXPECT_EQ(seen["chat"]["reason"], "length");
  EXPECT_EQ(seen["chat"]["eval_count"], 6);
  EXPECT_GT(seen["chat"]["prompt_eval_count"], 5);
  EXPECT_TRUE(seen["chat"]["durations"]);
  EXPECT_EQ(seen["stream"]["content"], seen["chat"]["content"]);
  EXPECT_GE(seen["stream"]["parts"], 2);
  EXPECT_TRUE(seen["stream"]["done"]);
  EXPECT_EQ(seen["stream"]["eval_count"], 6);
  // generate: through the template (the same prompt as the chat, a system turn aside) and raw.
  EXPECT_EQ(seen["generate"]["eval_count"], 6);
  EXPECT_EQ(seen["raw"]["eval_count"], 6);
  EXPECT_LE(seen["raw"]["prompt_eval_count"], 6);  // "Once upon a time" as it is, no template around it
  // format: a schema held by the grammar.
  EXPECT_TRUE(seen["format"]["raining"].is_boolean()) << seen["format"];
  EXPECT_TRUE(seen["format"]["city"] == "Paris" || seen["format"]["city"] == "Lyon") << seen["format"];
  // Tools offered (no tool_choice in Ollama's API: a random model need not call) and a call's answer rendered.
  EXPECT_TRUE(seen["tools"]["calls"].is_array());
  EXPECT_EQ(seen["answered"]["eval_count"], 6);
  // think: true — Qwen3.5's template opens the reasoning: the reply is thinking.
  EXPECT_GT(seen["think"]["thinking"], 0);
  // logprobs with alternatives, one per token.
  ASSERT_EQ(seen["logprobs"].size(), 6u);
  for (const auto& l : seen["logprobs"]) {
    EXPECT_LE(l["logprob"].get<double>(), 0.0);
    EXPECT_EQ(l["top"], 2);
  }
  // /api/embed: a unit vector per input.
  EXPECT_EQ(seen["embed"]["count"], 2);
  EXPECT_EQ(seen["embed"]["dim"], 64);
  EXPECT_NEAR(seen["embed"]["norm"].get<double>(), 1.0, 1e-5);
  EXPECT_GT(seen["embed"]["prompt_eval_count"], 4);
  // Errors in Ollama's shape, as the client's ResponseError.
  EXPECT_EQ(seen["unknown_model"]["status"], 404);
  EXPECT_THAT(seen["unknown_model"]["message"].get<std::string>(), HasSubstr("llama9"));
  EXPECT_EQ(seen["bad_option"]["status"], 400);
  EXPECT_THAT(seen["bad_option"]["message"].get<std::string>(), HasSubstr("options.mirostat"));
  EXPECT_THAT(seen["image"]["message"].get<std::string>(), HasSubstr("images"));
}

TEST(Ollama, OptionsMapToSamplingAndNumCtxBoundsTheRequest) {
  test::ServerProcess s(server_args());
  auto c = s.client();
  auto chat = [&](const json& options, int* status = nullptr) {
    const json body = {{"model", "tiny"}, {"stream", false}, {"think", false}, {"options", options},
                       {"messages", {{{"role", "user"}, {"content", "Hello"}}}}};
    auto r = c.Post("/api/chat", body.dump(), "application/json");
    EXPECT_TRUE(r);
    if (status) *status = r->status;
    return json::parse(r->body);
  };
  // The same seed and sampling: the same text; another seed: (almost surely) another.
  const json sampled = {{"temperature", 1.0}, {"top_k", 0}, {"top_p", 1.0}, {"seed", 7}, {"num_predict", 12}};
  const json a = chat(sampled), b = chat(sampled);
  EXPECT_EQ(a["message"]["content"], b["message"]["content"]);
  json other = sampled;
  other["seed"] = 8;
  EXPECT_NE(chat(other)["message"]["content"], a["message"]["content"]);
  // stop ends the reply before the string.
  const std::string text = chat({{"temperature", 0}, {"num_predict", 12}})["message"]["content"];
  size_t at = text.size() / 3;
  while (at + 1 < text.size() && !(std::isalpha(static_cast<unsigned char>(text[at])) &&
                                   std::isalpha(static_cast<unsigned char>(text[at + 1]))))
    at++;
  ASSERT_LT(at + 1, text.size()) << text;
  const json stopped = chat({{"temperature", 0}, {"num_predict", 12}, {"stop", {text.substr(at, 2)}}});
  EXPECT_EQ(stopped["message"]["content"], text.substr(0, text.find(text.substr(at, 2))));
  EXPECT_EQ(stopped["done_reason"], "stop");
  // num_ctx: the generation stops where the asked context ends; a prompt beyond it is refused by name.
  const int64_t n_prompt = chat({{"num_predict", 1}})["prompt_eval_count"];
  const json bounded = chat({{"temperature", 0}, {"num_ctx", n_prompt + 3}});
  EXPECT_EQ(bounded["eval_count"], 3);
  EXPECT_EQ(bounded["done_reason"], "length");
  int status = 0;
  const json refused = chat({{"num_ctx", 4}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_THAT(refused["error"].get<std::string>(), HasSubstr("options.num_ctx"));
  // Options that only place the model are accepted; unknown ones are not.
  EXPECT_EQ(chat({{"num_predict", 2}, {"num_gpu", 99}, {"num_thread", 2}, {"use_mmap", true}})["eval_count"], 2);
  chat({{"flash", 1}}, &status);
  EXPECT_EQ(status, 400);
}

// Each API reads its own body (no rewrite into OpenAI's): a field out of range, or a limit past the context, is
// refused under the name the client sent, in its API's error shape.
TEST(ServerApis, EachApiRefusesAFieldUnderItsOwnName) {
  test::ServerProcess s(server_args());
  auto c = s.client();
  auto refused = [&](const std::string& path, const json& body) {
    auto r = c.Post(path, body.dump(), "application/json");
    EXPECT_TRUE(r);
    EXPECT_EQ(r->status, 400) << path << " " << body << ": " << r->body;
    return json::parse(r->body);
  };
  const json hello = {{{"role", "user"}, {"content", "Hello"}}};
  // Ollama: options.temperature out of range, options.num_predict past the context (4096).
  json o = refused("/api/chat", {{"model", "tiny"}, {"stream", false}, {"messages", hello}, {"options", {{"temperature", 5}}}});
  EXPECT_THAT(o["error"].get<std::string>(), HasSubstr("options.temperature")) << o;
  o = refused("/api/chat", {{"model", "tiny"}, {"stream", false}, {"messages", hello}, {"options", {{"num_predict", 100000}}}});
  EXPECT_THAT(o["error"].get<std::string>(), HasSubstr("options.num_predict")) << o;
  o = refused("/api/generate", {{"model", "tiny"}, {"stream", false}, {"prompt", "Hi"}, {"options", {{"repeat_penalty", 0}}}});
  EXPECT_THAT(o["error"].get<std::string>(), HasSubstr("options.repeat_penalty")) << o;
  // Anthropic: max_tokens past the context, top_p 0.
  json a = refused("/v1/messages", {{"model", "tiny"}, {"max_tokens", 100000}, {"messages", hello}});
  EXPECT_EQ(a["type"], "error");
  EXPECT_THAT(a["error"]["message"].get<std::string>(), HasSubstr("max_tokens")) << a;
  a = refused("/v1/messages", {{"model", "tiny"}, {"max_tokens", 8}, {"top_p", 0}, {"messages", hello}});
  EXPECT_THAT(a["error"]["message"].get<std::string>(), HasSubstr("top_p")) << a;
  // Responses: max_output_tokens, not max_completion_tokens; top_logprobs out of range.
  json r = refused("/v1/responses", {{"input", "Hi"}, {"max_output_tokens", 100000}});
  EXPECT_EQ(r["error"]["param"], "max_output_tokens") << r;
  r = refused("/v1/responses", {{"input", "Hi"}, {"include", {"message.output_text.logprobs"}}, {"top_logprobs", 50}});
  EXPECT_EQ(r["error"]["param"], "top_logprobs") << r;
  r = refused("/v1/responses", {{"input", "Hi"}, {"temperature", 3}});
  EXPECT_EQ(r["error"]["param"], "temperature") << r;
}

// The web chat page in Debian's chromium (puppeteer-core), served over TLS behind an API key: a streamed reply
// with its reasoning apart, the key asked for, a reply stopped, regenerated, the conversation found after a
// reload, markdown rendered; nothing fetched from anywhere but the server. The screenshot is left in the
// test's working directory (webchat.png).
TEST(WebChat, InARealBrowserOverTlsWithAKey) {
  ASSERT_TRUE(std::filesystem::exists(kClients + "/node_modules/puppeteer-core/package.json"))
      << "the puppeteer-core npm package is missing: run scripts/setup.sh";
  ASSERT_TRUE(std::filesystem::exists("/usr/bin/chromium")) << "Debian's chromium is missing: run scripts/setup.sh";
  test::TempDir dir;
  const std::string cert = dir.file("cert.pem"), key = dir.file("key.pem");
  int st = 0;
  const std::string made = test::shell("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost -addext "
                                       "subjectAltName=IP:127.0.0.1 -keyout " + key + " -out " + cert, &st);
  ASSERT_EQ(st, 0) << made;
  test::ServerProcess s(server_args({"--api-key", "secret", "--ssl-cert-file", cert, "--ssl-key-file", key}));
  const std::string shot = (std::filesystem::current_path() / "webchat.png").string();
  std::filesystem::remove(shot);
  const std::string out = test::shell("cd " + kClients + " && KESTREL_URL=https://127.0.0.1:" + std::to_string(s.port()) +
                                          "/ KESTREL_KEY=secret KESTREL_SCREENSHOT=" + shot + " node webchat.mjs",
                                      &st);
  ASSERT_EQ(st, 0) << out;
  const json seen = json::parse(out.substr(out.rfind("\n{") == std::string::npos ? 0 : out.rfind("\n{") + 1));
  EXPECT_EQ(seen["title"], "Kestrel");
  ASSERT_EQ(seen["dialogs"].size(), 1u) << seen;  // the key asked for once, then kept
  EXPECT_THAT(seen["dialogs"][0].get<std::string>(), HasSubstr("API key"));
  // The first reply: Qwen3.5 thinks first, so the text is reasoning, shown apart (collapsible) and streamed.
  EXPECT_EQ(seen["first"]["cls"], "msg assistant") << seen["first"];
  EXPECT_FALSE(seen["first"]["reasoning"].get<std::string>().empty());
  EXPECT_TRUE(seen["first"]["collapsible"]);
  EXPECT_GE(seen["updates"], 5);
  EXPECT_EQ(seen["count_after_first"], 2);
  // Stopped: at once, a short reply, the page ready again.
  EXPECT_EQ(seen["stop"]["status"], "stopped");
  EXPECT_LT(seen["stop"]["ms"], 5000);
  EXPECT_LT(seen["stop"]["last"]["reasoning"].get<std::string>().size(), 3000u);
  EXPECT_EQ(seen["regenerate"]["before"], seen["regenerate"]["after"]);
  // Reloaded: the conversation is still there.
  EXPECT_EQ(seen["reload"]["titles"], json::array({"Tell me a story"}));
  EXPECT_EQ(seen["reload"]["messages"], 4);
  EXPECT_EQ(seen["reload"]["first_user"], "Tell me a story");
  // Markdown: a fenced block as code (escaped, not HTML), bold, a list.
  EXPECT_EQ(seen["markdown"]["code"], "print('<hi>')");
  EXPECT_EQ(seen["markdown"]["bold"], "bold");
  EXPECT_EQ(seen["markdown"]["items"], 2);
  EXPECT_EQ(seen["hosts"], json::array({"127.0.0.1:" + std::to_string(s.port())}));
  EXPECT_TRUE(std::filesystem::exists(shot));
  EXPECT_GT(std::filesystem::file_size(shot), 10000u);
}

// /infill on a tiny model with DeepSeek-Coder's vocabulary (its FIM tokens by their text, as llama.cpp finds
// them): the prompt laid out as llama.cpp lays it out, generated as the same token ids through /v1/completions.
TEST(Infill, FillInTheMiddleLayoutStreamingAndLimits) {
  test::TempDir dir;
  const std::string model = dir.file("coder.gguf");
  const auto made = test::run_kestrel({"synth", "--arch", "llama", "--preset", "tiny", "--type", "f32", "--vocab-from",
                                       test::shared("vocab/ggml-vocab-deepseek-coder.gguf"), "-o", model});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const GgufFile file = GgufFile::open(model);
  const auto tokenizer = Tokenizer::from_gguf(file);
  const Tokenizer& tok = *tokenizer;
  const Vocab& v = tok.vocab();
  ASSERT_EQ(v.fim_pre, v.find("<｜fim▁begin｜>"));
  ASSERT_EQ(v.fim_suf, v.find("<｜fim▁hole｜>"));
  ASSERT_EQ(v.fim_mid, v.find("<｜fim▁end｜>"));
  ASSERT_GE(v.fim_pre, 0);
  test::ServerProcess s({"-m", model, "-c", "256"});
  auto c = s.client();
  const std::string prefix = "def add(a, b):\n    ", suffix = "\n\nprint(add(1, 2))\n";
  const json infill = test::post_ok(c, "/infill", {{"input_prefix", prefix}, {"input_suffix", suffix}, {"prompt", "return"},
                                                   {"n_predict", 6}, {"temperature", 0}});
  // [BOS]<PRE>prefix prompt<SUF>suffix<MID>, built here from the vocabulary.
  std::vector<int32_t> ids = {v.bos, v.fim_pre};
  for (const auto& part : {prefix, std::string("return")})
    for (int32_t t : tok.encode(part, false, false)) ids.push_back(t);
  ids.push_back(v.fim_suf);
  for (int32_t t : tok.encode(suffix, false, false)) ids.push_back(t);
  ids.push_back(v.fim_mid);
  const json plain = test::post_ok(c, "/v1/completions", {{"prompt", ids}, {"max_tokens", 6}, {"temperature", 0}});
  EXPECT_EQ(infill["content"], plain["choices"][0]["text"]);
  EXPECT_EQ(infill["tokens_evaluated"], ids.size());
  EXPECT_EQ(infill["tokens_predicted"], 6);
  EXPECT_EQ(infill["stop"], true);
  EXPECT_EQ(infill["stop_type"], "limit");
  EXPECT_EQ(infill["prompt"], "<｜begin▁of▁sentence｜><｜fim▁begin｜>" + prefix + "return<｜fim▁hole｜>" + suffix + "<｜fim▁end｜>");

  // Extra files come first (no <|file_sep|> in this vocabulary: llama.cpp's snippet separator).
  const json with_extra = test::post_ok(c, "/infill", {{"input_prefix", prefix}, {"input_suffix", suffix}, {"n_predict", 2},
                                                       {"input_extra", {{{"filename", "util.py"}, {"text", "import os\n"}}}}});
  EXPECT_EQ(with_extra["prompt"].get<std::string>().rfind("\n\n--- snippet ---\n\nimport os\n<｜begin▁of▁sentence｜>", 0), 0u)
      << with_extra["prompt"];
  EXPECT_EQ(with_extra["input_extra_tokens_dropped"], 0);
  // More extra context than the context holds: the oldest dropped, and said.
  std::string big;
  for (int i = 0; i < 60; i++) big += "value_" + std::to_string(i) + " = compute(" + std::to_string(i) + ")\n";
  const json crowded = test::post_ok(c, "/infill", {{"input_prefix", prefix}, {"input_suffix", suffix}, {"n_predict", 8},
                                                    {"input_extra", {{{"filename", "big.py"}, {"text", big}}}}});
  EXPECT_GT(crowded["input_extra_tokens_dropped"].get<int>(), 0);
  EXPECT_LE(crowded["tokens_evaluated"].get<int>() + 8, 256);
  EXPECT_EQ(crowded["tokens_predicted"], 8);

  // Streamed: content pieces that add up, then the final object.
  auto r = c.Post("/infill", json{{"input_prefix", prefix}, {"input_suffix", suffix}, {"prompt", "return"}, {"n_predict", 6},
                                  {"temperature", 0}, {"stream", true}}.dump(),
                  "application/json");
  ASSERT_TRUE(r);
  std::string streamed;
  json last;
  for (const auto& line : test::sse_data_lines(r->body)) {
    last = json::parse(line);
    streamed += last["content"].get<std::string>();
  }
  EXPECT_EQ(streamed, infill["content"]);
  EXPECT_EQ(last["stop"], true);
  EXPECT_EQ(last["tokens_predicted"], 6);

  // A prefix longer than the context is refused, not cut.
  r = c.Post("/infill", json{{"input_prefix", big + big}, {"input_suffix", ""}}.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, HasSubstr("context"));
  r = c.Post("/infill", json{{"input_prefix", "x"}, {"input_suffix", "y"}, {"samplers", {"infill"}}}.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, HasSubstr("samplers"));
}

TEST(Infill, AModelWithoutFimTokensIsRefusedByName) {
  test::ServerProcess s({"-m", test::shared("models/stories260K.gguf")});
  auto c = s.client();
  auto r = c.Post("/infill", R"({"input_prefix": "Once", "input_suffix": "end"})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, HasSubstr("fill-in-the-middle"));
  EXPECT_THAT(r->body, HasSubstr("prefix suffix middle"));
}

}  // namespace
}  // namespace kestrel

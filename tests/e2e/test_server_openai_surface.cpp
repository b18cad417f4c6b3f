// The OpenAI surface beyond one completion, through `kestrel serve`:
// model names (--served-model-name aliases listed, served and echoed;
// GET /v1/models/{id}), logit_bias (banned tokens never come, favoured ones
// always do), and n > 1 (choices by index, greedy ones equal to the single
// answer, sampled ones reproducible by seed, streamed chunks adding up, the
// prompt counted once and its KV shared through the prefix cache).
#include <gmock/gmock.h>
#include <httplib.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "http_json.h"
#include "prometheus_text.h"
#include "serve_process.h"
#include "test_support.h"

namespace kestrel {

using json = nlohmann::json;

namespace {

json post(httplib::Client& c, const std::string& path, const json& body) { return test::post_ok(c, path, body); }

TEST(ServerModels, AliasesAreListedServedAndEchoed) {
  test::ServerProcess server({"-m", test::shared("models/stories260K.gguf"), "--served-model-name", "stories",
                              "--served-model-name", "tiny/stories-260k"});
  auto c = server.client();
  auto r = c.Get("/v1/models");
  ASSERT_TRUE(r);
  const json list = json::parse(r->body);
  ASSERT_EQ(list["data"].size(), 2u);
  EXPECT_EQ(list["data"][0]["id"], "stories");
  EXPECT_EQ(list["data"][1]["id"], "tiny/stories-260k");
  EXPECT_EQ(list["data"][1]["root"], "stories");

  r = c.Get("/v1/models/tiny/stories-260k");  // an id may hold slashes, as Hugging Face names do
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(json::parse(r->body)["id"], "tiny/stories-260k");
  EXPECT_EQ(json::parse(r->body)["object"], "model");
  r = c.Get("/v1/models/gpt-4");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "model_not_found");
  EXPECT_THAT(json::parse(r->body)["error"]["message"].get<std::string>(), ::testing::HasSubstr("'gpt-4'"));

  for (const char* name : {"stories", "tiny/stories-260k"}) {
    r = c.Post("/v1/completions", json{{"model", name}, {"prompt", "Once"}, {"max_tokens", 2}}.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(json::parse(r->body)["model"], name);
  }
  r = c.Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})",
             "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(json::parse(r->body)["model"], "stories");  // no `model`: the first name
  r = c.Post("/v1/completions", R"({"model": "stories260K.gguf", "prompt": "x"})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
}

TEST(ServerLogitBias, BannedTokensNeverComeAndFavouredOnesAlwaysDo) {
  test::ServerProcess s({"-m", test::shared("models/stories260K.gguf"), "-c", "256"});
  auto c = s.client();
  // Tokens named by id in the logprobs (vLLM's return_tokens_as_token_ids).
  const json greedy = {{"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0}, {"logprobs", 1},
                       {"return_tokens_as_token_ids", true}};
  const json plain = post(c, "/v1/completions", greedy);
  std::map<std::string, int> counts;
  for (const auto& t : plain["choices"][0]["logprobs"]["tokens"]) counts[t.get<std::string>()]++;
  const auto most = std::max_element(counts.begin(), counts.end(), [](auto& a, auto& b) { return a.second < b.second; });
  ASSERT_GE(most->second, 2) << plain.dump();
  ASSERT_EQ(most->first.rfind("token_id:", 0), 0u) << most->first;
  const std::string id = most->first.substr(9);
  const std::string piece = post(c, "/detokenize", {{"tokens", {std::stoi(id)}}})["content"];

  json banned = greedy;
  banned["logit_bias"] = {{id, -100}};
  const json without = post(c, "/v1/completions", banned);
  for (const auto& t : without["choices"][0]["logprobs"]["tokens"]) EXPECT_NE(t, most->first);
  EXPECT_NE(without["choices"][0]["text"], plain["choices"][0]["text"]);
  // Sampled at temperature 1, too.
  banned["temperature"] = 1.0;
  banned["seed"] = 5;
  const json sampled = post(c, "/v1/completions", banned);  // (kept: a range-for over a temporary's member dangles)
  for (const auto& t : sampled["choices"][0]["logprobs"]["tokens"]) EXPECT_NE(t, most->first);

  // +100 on one token: nothing else comes, in chat too.
  const json chat = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 6}, {"temperature", 0.7},
                     {"ignore_eos", true}, {"logit_bias", {{id, 100}}}};
  json favoured = chat;
  favoured["logprobs"] = true;
  favoured["return_tokens_as_token_ids"] = true;
  const json r = post(c, "/v1/chat/completions", favoured);
  ASSERT_EQ(r["choices"][0]["logprobs"]["content"].size(), 6u);
  for (const auto& t : r["choices"][0]["logprobs"]["content"]) EXPECT_EQ(t["token"], most->first);
  const size_t visible = piece.find_first_not_of(' ');
  if (visible != std::string::npos) {
    EXPECT_THAT(r["choices"][0]["message"]["content"].get<std::string>(), ::testing::HasSubstr(piece.substr(visible)));
  }
}

const std::string kPrompt =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends.";

TEST(ServerChoices, NChoicesShareThePromptAndAddUp) {
  test::ServerProcess s({"-m", test::shared("models/stories260K.gguf"), "-c", "512", "--kv-block-size", "8"});
  auto c = s.client();
  const json single = post(c, "/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 12}, {"temperature", 0}});
  const json greedy = post(c, "/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 12}, {"temperature", 0}, {"n", 3}});
  ASSERT_EQ(greedy["choices"].size(), 3u);
  for (int i = 0; i < 3; i++) {
    EXPECT_EQ(greedy["choices"][i]["index"], i);
    EXPECT_EQ(greedy["choices"][i]["text"], single["choices"][0]["text"]) << i;
  }
  EXPECT_EQ(greedy["usage"]["prompt_tokens"], single["usage"]["prompt_tokens"]);  // once, not three times
  EXPECT_EQ(greedy["usage"]["completion_tokens"], 36);

  // Sampled: the same seed gives the same three choices, and they are not all alike.
  const json sampled_body = {{"prompt", kPrompt}, {"max_tokens", 12}, {"temperature", 1.0}, {"seed", 11}, {"n", 3}};
  const json a = post(c, "/v1/completions", sampled_body), b = post(c, "/v1/completions", sampled_body);
  std::set<std::string> distinct;
  for (int i = 0; i < 3; i++) {
    EXPECT_EQ(a["choices"][i]["text"], b["choices"][i]["text"]) << i;
    distinct.insert(a["choices"][i]["text"].get<std::string>());
  }
  EXPECT_GT(distinct.size(), 1u);

  // Streamed chat: chunks of both choices, each index's deltas adding up to the whole answer's choice.
  json chat = {{"messages", {{{"role", "user"}, {"content", "Tell me a story"}}}}, {"max_tokens", 16},
               {"temperature", 0.8}, {"seed", 3}, {"n", 2}};
  const json whole = post(c, "/v1/chat/completions", chat);
  chat["stream"] = true;
  chat["stream_options"] = {{"include_usage", true}};
  auto r = c.Post("/v1/chat/completions", chat.dump(), "application/json");
  ASSERT_TRUE(r);
  std::map<int, std::string> texts;
  std::map<int, std::string> finishes;
  int usage_chunks = 0, done = 0;
  for (size_t at = 0; (at = r->body.find("data: ", at)) != std::string::npos;) {
    const size_t end = r->body.find("\n\n", at);
    const std::string data = r->body.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]") {
      done++;
      continue;
    }
    const json chunk = json::parse(data);
    if (chunk.contains("usage")) {
      usage_chunks++;
      EXPECT_EQ(chunk["usage"]["completion_tokens"], whole["usage"]["completion_tokens"]);
    }
    for (const auto& ch : chunk["choices"]) {
      if (ch["delta"].contains("content")) texts[ch["index"]] += ch["delta"]["content"].get<std::string>();
      if (!ch["finish_reason"].is_null()) finishes[ch["index"]] = ch["finish_reason"];
    }
  }
  EXPECT_EQ(done, 1);
  EXPECT_EQ(usage_chunks, 1);
  ASSERT_EQ(texts.size(), 2u);
  for (int i = 0; i < 2; i++) {
    EXPECT_EQ(texts[i], whole["choices"][i]["message"]["content"]) << i;
    EXPECT_EQ(finishes[i], whole["choices"][i]["finish_reason"]) << i;
  }

  // The choices after the first reused its prompt blocks: 4 full blocks of 8 of a 36-token prompt each.
  const json prompt_len = post(c, "/tokenize", {{"content", kPrompt}, {"add_special", true}});
  const int full_blocks = (prompt_len["count"].get<int>() - 1) / 8;
  auto fresh = post(c, "/v1/completions", {{"prompt", "A brand new prompt about a dog named Max who liked to run fast in the field."},
                                           {"max_tokens", 2}, {"n", 4}});
  ASSERT_EQ(fresh["choices"].size(), 4u);
  EXPECT_GE(fresh["usage"]["prompt_tokens"].get<int>(), 9);
  const double hits = test::parse_prometheus(c.Get("/metrics")->body).get("kestrel_prefix_cache_hits_total");
  EXPECT_GE(hits, 8.0 * full_blocks * 2 + 8.0 * 3);  // the n=3 greedy request's two followers at least, and the n=4 one's
  r = c.Post("/v1/completions", json{{"prompt", "x"}, {"n", 17}}.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);  // n beyond 16 (a step's batch) is refused, naming n
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "n");
}

}  // namespace
}  // namespace kestrel

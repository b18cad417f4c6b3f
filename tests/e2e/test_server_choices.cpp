// n > 1 through `kestrel serve`: n choices with their indexes, greedy ones all
// equal to the single answer, sampled ones reproducible by seed and streamed
// as interleaved chunks that add up to the whole answer; the prompt counted
// once in usage, and its KV shared by the choices through the prefix cache.
#include <gmock/gmock.h>
#include <httplib.h>

#include <map>
#include <nlohmann/json.hpp>

#include "prometheus_text.h"
#include "http_json.h"
#include "serve_process.h"
#include "test_support.h"

namespace kestrel {
namespace {

using json = nlohmann::json;

json post(httplib::Client& c, const std::string& path, const json& body) { return test::post_ok(c, path, body); }

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
  const json prompt_len = post(c, "/tokenize", {{"content", kPrompt}});
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

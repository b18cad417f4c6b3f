// logit_bias through `kestrel serve`: the token a greedy completion writes
// most often never appears once it is biased by -100; a token biased by +100
// is all that comes out — streamed or not, chat or completion.
#include <gmock/gmock.h>
#include <httplib.h>

#include <map>
#include <nlohmann/json.hpp>

#include "http_json.h"
#include "serve_process.h"
#include "test_support.h"

namespace kestrel {
namespace {

using json = nlohmann::json;

json post(httplib::Client& c, const std::string& path, const json& body) { return test::post_ok(c, path, body); }

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
  for (const auto& t : post(c, "/v1/completions", banned)["choices"][0]["logprobs"]["tokens"]) EXPECT_NE(t, most->first);

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
  if (visible != std::string::npos)
    EXPECT_THAT(r["choices"][0]["message"]["content"].get<std::string>(), ::testing::HasSubstr(piece.substr(visible)));
}

}  // namespace
}  // namespace kestrel

// The typed request every API's reader fills (serving/api/completion_ask.h): Fields reads optional fields and
// names a refused one the way the client sent it, under the API's prefix (Ollama's "options.").
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "serving/api/completion_ask.h"

namespace kestrel {
namespace {

using ojson = nlohmann::ordered_json;

// The ApiError a call throws (status 0: none).
template <class F>
ApiError refusal(F&& f) {
  try {
    f();
  } catch (const ApiError& e) {
    return e;
  }
  return ApiError{0, "", "", "", ""};
}

TEST(Fields, AbsentOrNullIsTheDefaultAndARefusalNamesTheFieldUnderItsPrefix) {
  const ojson o = {{"temperature", 0.5}, {"top_k", nullptr}, {"num_predict", 7}, {"seed", "x"}, {"hot", 5.0}};
  const Fields f(o, "options.");
  EXPECT_EQ(f.number("temperature", 0, 2, 1.0), 0.5);
  EXPECT_EQ(f.integer("top_k", -1, 100, 40), 40);  // null: the default
  EXPECT_FALSE(f.integer("missing", 0, 1).has_value());
  EXPECT_EQ(f.integer("num_predict", 0, 100, 0), 7);
  EXPECT_EQ(f.name("seed"), "options.seed");

  ApiError e = refusal([&] { f.integer("seed", 0, 10); });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "options.seed");
  EXPECT_EQ(e.message, "'options.seed' must be an integer");
  e = refusal([&] { f.number("hot", 0, 2); });
  EXPECT_EQ(e.param, "options.hot");
  EXPECT_EQ(e.message, "'options.hot' = 5 is out of range (0 to 2)");
  e = refusal([&] { f.boolean("temperature"); });
  EXPECT_EQ(e.message, "'options.temperature' must be true or false");
}

TEST(Fields, StringsTakeOneOrAListOfNonEmptyOnesUpToTheLimit) {
  const ojson o = {{"one", "a"}, {"list", {"a", "b"}}, {"empty", {"a", ""}}, {"long", {"a", "b", "c"}}, {"num", 3}};
  const Fields f(o);
  EXPECT_EQ(f.strings("one", 2), std::vector<std::string>{"a"});
  EXPECT_EQ(f.strings("list", 2), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(f.strings("absent", 2).empty());
  EXPECT_EQ(refusal([&] { f.strings("empty", 2); }).message, "'empty' strings must not be empty");
  EXPECT_EQ(refusal([&] { f.strings("long", 2); }).param, "long");
  EXPECT_EQ(refusal([&] { f.strings("num", 2); }).message, "'num' must be a string or an array of up to 2 strings");
}

TEST(CompletionAsk, StartsFromTheNeutralSampling) {
  const CompletionAsk ask;
  EXPECT_EQ(ask.sampling.temperature, 1.0f);
  EXPECT_EQ(ask.sampling.top_k, 0);
  EXPECT_EQ(ask.sampling.top_p, 1.0f);
  EXPECT_EQ(ask.sampling.min_p, 0.0f);
  EXPECT_EQ(ask.sampling.repeat_penalty, 1.0f);
  EXPECT_FALSE(ask.seed.has_value());
  EXPECT_FALSE(ask.max_tokens.has_value());
  EXPECT_EQ(ask.names.max_tokens, "max_tokens");
}

}  // namespace
}  // namespace kestrel

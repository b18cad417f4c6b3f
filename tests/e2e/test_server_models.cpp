// Model names: --served-model-name aliases (any may be requested and is
// echoed back), GET /v1/models listing them and GET /v1/models/{id}.
#include <gmock/gmock.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "serve_process.h"
#include "test_support.h"

namespace kestrel {
namespace {

using json = nlohmann::json;

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

}  // namespace
}  // namespace kestrel

// --reasoning-format through `kestrel serve`: with DeepSeek-R1's template the
// reply begins inside <think>, so what stories260K writes (it never closes the
// tag) is all reasoning_content — exactly the text a server without the split
// answers as content — in one body and as streamed reasoning deltas; a
// template that opens no <think> leaves the reply as content.
#include <gmock/gmock.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "serve_process.h"
#include "test_support.h"

namespace kestrel {
namespace {

using json = nlohmann::json;

const std::string kStories = test::shared("models/stories260K.gguf");
const json kChat = {{"messages", {{{"role", "user"}, {"content", "Tell me a story"}}}}, {"max_tokens", 24}, {"temperature", 0}};

json chat(test::ServerProcess& s, json body) {
  auto c = s.client();
  auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
  return r ? json::parse(r->body) : json();
}

TEST(ServerReasoning, AnOpenThinkMakesTheReplyReasoningContentWholeAndStreamed) {
  test::ServerProcess plain({"-m", kStories, "-c", "256", "--chat-template", "deepseek-r1", "--reasoning-format", "none"});
  test::ServerProcess split({"-m", kStories, "-c", "256", "--chat-template", "deepseek-r1"});  // auto: the template thinks
  EXPECT_THAT(split.log(), ::testing::HasSubstr("reasoning split from content"));
  const json as_content = chat(plain, kChat)["choices"][0]["message"];
  const std::string text = as_content["content"];
  ASSERT_FALSE(text.empty());
  EXPECT_FALSE(as_content.contains("reasoning_content"));

  const json as_reasoning = chat(split, kChat)["choices"][0]["message"];
  // the same text, the whitespace around it trimmed as around a <think> block
  const size_t b = text.find_first_not_of(" \n"), e = text.find_last_not_of(" \n");
  EXPECT_EQ(as_reasoning["reasoning_content"], text.substr(b, e + 1 - b));
  EXPECT_EQ(as_reasoning["content"], "");

  // Streamed: reasoning deltas joined give the same text; no content delta carries text.
  json body = kChat;
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
    const json delta = json::parse(data)["choices"][0]["delta"];
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
  const json a = chat(plain, kChat)["choices"][0]["message"], b = chat(split, kChat)["choices"][0]["message"];
  EXPECT_EQ(a["content"], b["content"]);
  EXPECT_FALSE(b.contains("reasoning_content"));
}

}  // namespace
}  // namespace kestrel

// The HTTP layer's pieces that need no socket and no model: the routing
// table and the server-sent-event framing of a streamed completion.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "serving/completion_stream.h"
#include "serving/router.h"

namespace kestrel {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

HttpResponse text(const std::string& s) { return json_response(s); }

TEST(Router, DispatchesByMethodAndPathAndAnswersTheRestWithErrors) {
  Router r;
  r.add("GET", "/a", [](const HttpRequest&) { return text("get a"); });
  r.add("POST", "/a", [](const HttpRequest& q) { return text("post a " + q.body); });
  r.add("POST", "/b", [](const HttpRequest&) { return text("post b"); });
  EXPECT_EQ(r.handle({"GET", "/a", ""}).body, "get a");
  EXPECT_EQ(r.handle({"POST", "/a", "x"}).body, "post a x");
  EXPECT_EQ(r.handle({"POST", "/b", ""}).body, "post b");

  const HttpResponse missing = r.handle({"GET", "/c", ""});
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(json::parse(missing.body)["error"]["message"], "GET /c: no such endpoint");
  EXPECT_TRUE(missing.headers.empty());

  const HttpResponse wrong = r.handle({"DELETE", "/a", ""});
  EXPECT_EQ(wrong.status, 405);
  EXPECT_EQ(json::parse(wrong.body)["error"]["message"], "DELETE /a: method not allowed");
  ASSERT_EQ(wrong.headers.size(), 1u);
  EXPECT_EQ(wrong.headers[0].first, "Allow");
  EXPECT_EQ(wrong.headers[0].second, "GET, POST");

  EXPECT_THROW(r.add("POST", "/b", [](const HttpRequest&) { return text(""); }), Error);
}

struct RecordingSink : ChunkSink {
  std::vector<std::string> writes;
  bool open = true;
  bool write(std::string_view b) override {
    if (!open) return false;
    writes.emplace_back(b);
    return true;
  }
  bool writable() const override { return open; }
};

StreamEvent token_event(const std::string& s) {
  StreamEvent e;
  e.text = s;
  e.has_token = true;
  return e;
}

StreamEvent end_event(const std::string& held_back) {
  StreamEvent e;
  e.done = true;
  e.text = held_back;
  e.finish_reason = "length";
  e.prompt_tokens = 5;
  e.completion_tokens = 3;
  return e;
}

json data_of(const std::string& event) {
  EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
  EXPECT_EQ(event.substr(event.size() - 2), "\n\n") << event;
  return json::parse(event.substr(6, event.size() - 8));
}

TEST(CompletionStream, ChatChunksOnePerTokenThenTheEndWithUsageThenDone) {
  auto ch = std::make_shared<RequestChannel>();
  std::vector<int64_t> ended;
  CompletionStream s(ch, {"chatcmpl-3", true, 1700000000, "m"}, false, true,
                     [&](const StreamEvent& e) { ended.push_back(e.completion_tokens); });
  ch->push(token_event("Once"));
  ch->push(token_event(""));  // held back: no chunk
  ch->push(token_event(" upon"));
  RecordingSink sink;
  EXPECT_EQ(s.step(sink), StreamStep::More);
  ASSERT_EQ(sink.writes.size(), 3u);  // the role chunk, two tokens
  const json role = data_of(sink.writes[0]);
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["id"], "chatcmpl-3");
  EXPECT_EQ(role["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(data_of(sink.writes[1])["choices"][0]["delta"]["content"], "Once");
  EXPECT_EQ(data_of(sink.writes[2])["choices"][0]["delta"]["content"], " upon");
  EXPECT_TRUE(data_of(sink.writes[2])["choices"][0]["finish_reason"].is_null());

  ch->push(end_event(" a"));
  EXPECT_EQ(s.step(sink), StreamStep::Done);
  ASSERT_EQ(sink.writes.size(), 6u);  // the last chunk, the usage-only chunk, [DONE]
  const json last = data_of(sink.writes[3]);
  EXPECT_EQ(last["choices"][0]["delta"]["content"], " a");
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(last["usage"]["total_tokens"], 8);
  const json usage = data_of(sink.writes[4]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 3);
  EXPECT_EQ(sink.writes[5], "data: [DONE]\n\n");
  EXPECT_EQ(ended, std::vector<int64_t>{3});
  s.close();
  EXPECT_FALSE(ch->cancelled());  // it finished
}

TEST(CompletionStream, CompletionsShapeAndAClientThatLeftCancelsTheRequest) {
  auto ch = std::make_shared<RequestChannel>();
  CompletionStream s(ch, {"cmpl-4", false, 1, "m"}, false, false, nullptr);
  ch->push(token_event("x"));
  RecordingSink sink;
  EXPECT_EQ(s.step(sink), StreamStep::More);
  ASSERT_EQ(sink.writes.size(), 1u);  // no role chunk for completions
  const json c = data_of(sink.writes[0]);
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][0]["text"], "x");
  EXPECT_FALSE(ch->cancelled());

  sink.open = false;  // the client went away while nothing was produced
  EXPECT_EQ(s.step(sink), StreamStep::Abort);
  EXPECT_TRUE(ch->cancelled());
}

TEST(CompletionStream, AnUnfinishedStreamIsCancelledWhenTheResponseCloses) {
  auto ch = std::make_shared<RequestChannel>();
  CompletionStream s(ch, {"cmpl-5", false, 1, "m"}, false, false, nullptr);
  s.close();
  EXPECT_TRUE(ch->cancelled());
}

TEST(CompletionStream, AnErrorEndIsAnErrorEventThenDone) {
  auto ch = std::make_shared<RequestChannel>();
  CompletionStream s(ch, {"cmpl-6", false, 1, "m"}, false, true, nullptr);
  StreamEvent e = end_event("");
  e.finish_reason = "error";
  e.error = "boom";
  ch->push(e);
  RecordingSink sink;
  EXPECT_EQ(s.step(sink), StreamStep::Done);
  ASSERT_EQ(sink.writes.size(), 2u);  // no usage chunk after an error
  EXPECT_THAT(data_of(sink.writes[0])["error"]["message"].get<std::string>(), HasSubstr("generation failed: boom"));
  EXPECT_EQ(sink.writes[1], "data: [DONE]\n\n");
}

}  // namespace
}  // namespace kestrel

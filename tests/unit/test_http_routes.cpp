// The HTTP layer's pieces that need no socket and no model: the routing
// table, the server-sent-event framing of a streamed completion, the whole
// (deferred) completion and the offloaded response.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "serving/api/completion_stream.h"
#include "serving/api/completion_whole.h"
#include "serving/http/offload.h"
#include "serving/http/router.h"

namespace kestrel {

using json = nlohmann::json;

namespace {
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

// The server-sent events in what a poll appended.
std::vector<std::string> events_in(const std::string& out) {
  std::vector<std::string> events;
  for (size_t at = 0; at < out.size();) {
    const size_t end = out.find("\n\n", at);
    if (end == std::string::npos) {
      ADD_FAILURE() << "an unterminated event: " << out.substr(at);
      break;
    }
    events.push_back(out.substr(at, end + 2 - at));
    at = end + 2;
  }
  return events;
}

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

TEST(CompletionStream, ChatChunksOnePerTokenThenTheEndThenUsageOnceThenDone) {
  auto ch = std::make_shared<RequestChannel>();
  std::vector<int64_t> ended;
  CompletionStream s(ch, {"chatcmpl-3", true, 1700000000, "m"}, false, true,
                     [&](const StreamEvent& e) { ended.push_back(e.completion_tokens); });
  ch->push(token_event("Once"));
  ch->push(token_event(""));  // held back: no chunk
  ch->push(token_event(" upon"));
  std::string out;
  EXPECT_EQ(s.poll(out), StreamStep::More);
  std::vector<std::string> writes = events_in(out);
  ASSERT_EQ(writes.size(), 3u);  // the role chunk, two tokens
  const json role = data_of(writes[0]);
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["id"], "chatcmpl-3");
  EXPECT_EQ(role["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(data_of(writes[1])["choices"][0]["delta"]["content"], "Once");
  EXPECT_EQ(data_of(writes[2])["choices"][0]["delta"]["content"], " upon");
  EXPECT_TRUE(data_of(writes[2])["choices"][0]["finish_reason"].is_null());

  out.clear();
  EXPECT_EQ(s.poll(out), StreamStep::More);  // nothing new: nothing written
  EXPECT_EQ(out, "");

  ch->push(end_event(" a"));
  EXPECT_EQ(s.poll(out), StreamStep::Done);
  writes = events_in(out);
  ASSERT_EQ(writes.size(), 3u);  // the last chunk, the usage-only chunk, [DONE]
  const json last = data_of(writes[0]);
  EXPECT_EQ(last["choices"][0]["delta"]["content"], " a");
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_FALSE(last.contains("usage"));  // usage comes once, on its own
  const json usage = data_of(writes[1]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 3);
  EXPECT_EQ(usage["usage"]["total_tokens"], 8);
  EXPECT_EQ(writes[2], "data: [DONE]\n\n");
  EXPECT_EQ(ended, std::vector<int64_t>{3});
  s.close(true);
  EXPECT_FALSE(ch->cancelled());  // it finished
}

TEST(CompletionStream, CompletionsShapeAndAClientThatLeftCancelsTheRequest) {
  auto ch = std::make_shared<RequestChannel>();
  CompletionStream s(ch, {"cmpl-4", false, 1, "m"}, false, false, nullptr);
  ch->push(token_event("x"));
  std::string out;
  EXPECT_EQ(s.poll(out), StreamStep::More);
  const std::vector<std::string> writes = events_in(out);
  ASSERT_EQ(writes.size(), 1u);  // no role chunk for completions
  const json c = data_of(writes[0]);
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][0]["text"], "x");
  EXPECT_FALSE(ch->cancelled());

  s.close(false);  // the transport lost the client
  EXPECT_TRUE(ch->cancelled());
}

TEST(CompletionStream, AReaderTooSlowOverflowsItsChannelAndTheStreamIsCutNotBuffered) {
  auto ch = std::make_shared<RequestChannel>();
  int ends = 0;
  CompletionStream s(ch, {"cmpl-9", false, 1, "m"}, false, false, [&](const StreamEvent&) { ends++; });
  for (size_t i = 0; i < RequestChannel::kMaxPending + 100; i++) ch->push(token_event("y"));
  EXPECT_TRUE(ch->overflowed());
  EXPECT_TRUE(ch->cancelled());  // the engine stops the request at its next step...
  ch->push(end_event(""));       // ...and ends it
  std::string out;
  EXPECT_EQ(s.poll(out), StreamStep::Abort);  // no [DONE]: the client sees a cut stream
  const std::vector<std::string> writes = events_in(out);
  EXPECT_EQ(writes.size(), RequestChannel::kMaxPending);  // what was held, no more
  EXPECT_EQ(out.find("[DONE]"), std::string::npos);
  EXPECT_EQ(ends, 1);
}

TEST(CompletionStream, AnUnfinishedStreamIsCancelledWhenTheResponseCloses) {
  auto ch = std::make_shared<RequestChannel>();
  CompletionStream s(ch, {"cmpl-5", false, 1, "m"}, false, false, nullptr);
  s.close(false);
  EXPECT_TRUE(ch->cancelled());
}

TEST(CompletionStream, AnErrorEndIsAnErrorEventThenDone) {
  auto ch = std::make_shared<RequestChannel>();
  CompletionStream s(ch, {"cmpl-6", false, 1, "m"}, false, true, nullptr);
  StreamEvent e = end_event("");
  e.finish_reason = "error";
  e.error = "boom";
  ch->push(e);
  std::string out;
  EXPECT_EQ(s.poll(out), StreamStep::Done);
  const std::vector<std::string> writes = events_in(out);
  ASSERT_EQ(writes.size(), 2u);  // no usage chunk after an error
  EXPECT_THAT(data_of(writes[0])["error"]["message"].get<std::string>(), HasSubstr("generation failed: boom"));
  EXPECT_EQ(writes[1], "data: [DONE]\n\n");
}

TEST(RequestChannel, ReadyIsCalledForEveryPushAndAtOnceForWhatAlreadyWaits) {
  RequestChannel ch;
  ch.push(token_event("a"));
  int calls = 0;
  ch.on_ready([&] { calls++; });
  EXPECT_EQ(calls, 1);  // "a" was waiting
  ch.push(token_event("b"));
  ch.push(end_event(""));
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(ch.take().size(), 3u);
  EXPECT_TRUE(ch.take().empty());
}

TEST(WholeCompletion, GathersTheTextAndAnswersOnceTheRequestEnds) {
  auto ch = std::make_shared<RequestChannel>();
  int ends = 0;
  WholeCompletion w(ch, {"cmpl-7", false, 1, "m"}, false, [&](const StreamEvent&) { ends++; });
  ch->push(token_event("Once"));
  ch->push(token_event(" upon"));
  EXPECT_FALSE(w.poll().has_value());
  ch->push(end_event(" a"));
  const std::optional<HttpResponse> r = w.poll();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200);
  const json body = json::parse(r->body);
  EXPECT_EQ(body["choices"][0]["text"], "Once upon a");
  EXPECT_EQ(body["usage"]["completion_tokens"], 3);
  EXPECT_EQ(ends, 1);
  w.close(true);
  EXPECT_FALSE(ch->cancelled());
}

// A DeepSeek-R1 reply that thinks, says a word and calls two tools (Hermes
// format), fed token by token: streamed as reasoning deltas, a content delta,
// then one chunk with both calls and finish_reason "tool_calls"; whole, as one
// message with reasoning_content, content and tool_calls.
const std::vector<std::string> kToolReply = {"I should", " look it up.\n</th", "ink>\n\nChecking", ".\n<tool", "_call>\n{\"name\": \"get_weather\", ",
                                             "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n",
                                             "{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"};

StreamEvent stop_event() {
  StreamEvent e = end_event("");
  e.finish_reason = "stop";
  return e;
}

TEST(CompletionStream, ReasoningContentAndToolCallsAsTheirOwnDeltas) {
  auto ch = std::make_shared<RequestChannel>();
  CompletionStream s(ch, {"chatcmpl-5", true, 1, "m"}, false, false, nullptr,
                     ReplyParser(true, ToolCallFormat::Hermes, true));
  for (const auto& piece : kToolReply) ch->push(token_event(piece));
  ch->push(stop_event());
  std::string out;
  EXPECT_EQ(s.poll(out), StreamStep::Done);
  std::string reasoning, content;
  json calls, finish;
  for (const auto& ev : events_in(out)) {
    if (ev == "data: [DONE]\n\n") continue;
    const json c = data_of(ev)["choices"][0];
    if (c["delta"].contains("reasoning_content")) reasoning += c["delta"]["reasoning_content"].get<std::string>();
    if (c["delta"].contains("content")) content += c["delta"]["content"].get<std::string>();
    if (c["delta"].contains("tool_calls")) calls = c["delta"]["tool_calls"];
    if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
  }
  EXPECT_EQ(reasoning, "I should look it up.");
  EXPECT_EQ(content, "Checking.\n");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0]["index"], 0);
  EXPECT_EQ(calls[0]["type"], "function");
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(calls[0]["function"]["arguments"].get<std::string>()), json({{"city", "Paris"}}));
  EXPECT_EQ(calls[1]["index"], 1);
  EXPECT_EQ(calls[1]["function"]["name"], "get_time");
  EXPECT_NE(calls[0]["id"], calls[1]["id"]);
  EXPECT_EQ(finish, "tool_calls");
}

TEST(WholeCompletion, ReasoningContentAndToolCallsInOneMessage) {
  for (const bool parallel : {true, false}) {
    auto ch = std::make_shared<RequestChannel>();
    WholeCompletion w(ch, {"chatcmpl-6", true, 1, "m"}, false, nullptr, ReplyParser(true, ToolCallFormat::Hermes, parallel));
    for (const auto& piece : kToolReply) ch->push(token_event(piece));
    ch->push(stop_event());
    const std::optional<HttpResponse> r = w.poll();
    ASSERT_TRUE(r.has_value());
    const json c = json::parse(r->body)["choices"][0];
    EXPECT_EQ(c["finish_reason"], "tool_calls");
    EXPECT_EQ(c["message"]["reasoning_content"], "I should look it up.");
    EXPECT_EQ(c["message"]["content"], "Checking.");
    ASSERT_EQ(c["message"]["tool_calls"].size(), parallel ? 2u : 1u);  // parallel_tool_calls: false keeps the first
    EXPECT_FALSE(c["message"]["tool_calls"][0].contains("index"));
    EXPECT_EQ(c["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  }
  // Offered tools, answered in prose: a plain message, finish_reason unchanged.
  auto ch = std::make_shared<RequestChannel>();
  WholeCompletion w(ch, {"chatcmpl-8", true, 1, "m"}, false, nullptr, ReplyParser(std::nullopt, ToolCallFormat::Hermes, true));
  ch->push(token_event("It is sunny."));
  ch->push(stop_event());
  const json c = json::parse(w.poll()->body)["choices"][0];
  EXPECT_EQ(c["finish_reason"], "stop");
  EXPECT_EQ(c["message"]["content"], "It is sunny.");
  EXPECT_FALSE(c["message"].contains("tool_calls"));
}

TEST(WholeCompletion, AnErrorIs500AndClosingEarlyCancels) {
  auto ch = std::make_shared<RequestChannel>();
  WholeCompletion w(ch, {"chatcmpl-8", true, 1, "m"}, false, nullptr);
  StreamEvent e = end_event("");
  e.finish_reason = "error";
  e.error = "boom";
  ch->push(e);
  EXPECT_EQ(w.poll()->status, 500);

  auto ch2 = std::make_shared<RequestChannel>();
  WholeCompletion early(ch2, {"chatcmpl-9", true, 1, "m"}, false, nullptr);
  early.close(false);
  EXPECT_TRUE(ch2->cancelled());
}

// An executor that runs tasks only when told.
struct ManualOffload {
  std::vector<std::function<void()>> tasks;
  Offload offload() {
    return [this](std::function<void()> t) { tasks.push_back(std::move(t)); };
  }
  void run_all() {
    for (auto& t : tasks) t();
    tasks.clear();
  }
};

TEST(OffloadedResponse, RunsTheJobOnTheOffloadAndSignalsWhenItIsReady) {
  ManualOffload pool;
  const HttpResponse r = OffloadedResponse::start(pool.offload(), [] { return json_response("{}", 201); });
  ASSERT_TRUE(r.later);
  int ready = 0;
  r.later->on_ready([&] { ready++; });
  EXPECT_FALSE(r.later->poll().has_value());  // not run yet
  EXPECT_EQ(ready, 0);
  pool.run_all();
  EXPECT_EQ(ready, 1);
  const std::optional<HttpResponse> got = r.later->poll();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->status, 201);
  EXPECT_FALSE(r.later->poll().has_value());  // once

  const HttpResponse failing = OffloadedResponse::start(nullptr, []() -> HttpResponse { throw Error("kaput"); });
  const std::optional<HttpResponse> err = failing.later->poll();  // no offload: ran at once
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->status, 500);
  EXPECT_THAT(err->body, HasSubstr("kaput"));
}

TEST(OffloadedResponse, AClientGoneBeforeTheJobEndsCancelsWhatTheJobStarted) {
  ManualOffload pool;
  auto ch = std::make_shared<RequestChannel>();
  const HttpResponse r = OffloadedResponse::start(pool.offload(), [ch] {
    HttpResponse s;
    s.stream = std::make_shared<CompletionStream>(ch, CompletionIds{"cmpl-1", false, 1, "m"}, false, false, nullptr);
    return s;
  });
  r.later->close(false);  // the connection died while the request was being parsed
  pool.run_all();
  EXPECT_TRUE(ch->cancelled());
}

}  // namespace
}  // namespace kestrel

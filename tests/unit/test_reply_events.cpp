// A reply as typed events (serving/api/reply_events.h) and the fronts that
// say them in their API's shape without reading another API's text back:
// Anthropic's message and events, Ollama's lines, a Responses object, an
// infill. Engine events are pushed into channels by hand; what each front
// writes is checked field by field.
#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "serving/api/anthropic_api.h"
#include "serving/api/infill_api.h"
#include "serving/api/ollama_api.h"
#include "serving/api/reply_events.h"
#include "serving/api/responses_api.h"

namespace kestrel {
namespace {

using json = nlohmann::json;

StreamEvent token(const std::string& text, float logprob = -0.5f) {
  StreamEvent e;
  e.text = text;
  e.has_token = true;
  e.token = {7, text, logprob};
  e.top = {{7, text, logprob}, {8, "x", -3.0f}};
  return e;
}

StreamEvent end(const std::string& reason, const std::string& held_back = "") {
  StreamEvent e;
  e.done = true;
  e.text = held_back;
  e.finish_reason = reason;
  e.prompt_tokens = 10;
  e.cached_tokens = 4;
  e.completion_tokens = 3;
  return e;
}

// Reasoning, then prose, then two Hermes calls, split across token boundaries.
const std::vector<std::string> kToolReply = {"I should", " look it up.\n</th", "ink>\n\nChecking", ".\n<tool",
                                             "_call>\n{\"name\": \"get_weather\", ",
                                             "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n",
                                             "{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"};

ReplyParser tool_parser() { return ReplyParser(true, ToolCallFormat::Hermes, true); }

std::shared_ptr<ReplyEvents> events_over(const std::shared_ptr<RequestChannel>& ch, std::optional<ReplyParser> reply,
                                         std::function<void(const StreamEvent&)> on_end = nullptr) {
  return std::make_shared<ReplyEvents>(std::vector<std::shared_ptr<RequestChannel>>{ch}, std::move(reply), std::move(on_end));
}

// "event: x\ndata: {...}\n\n" (or "data: {...}\n\n") as (event, data) pairs.
std::vector<std::pair<std::string, json>> sse(const std::string& out) {
  std::vector<std::pair<std::string, json>> events;
  for (size_t at = 0; at < out.size();) {
    const size_t stop = out.find("\n\n", at);
    if (stop == std::string::npos) {
      ADD_FAILURE() << "an unterminated event: " << out.substr(at);
      break;
    }
    const std::string block = out.substr(at, stop - at);
    at = stop + 2;
    std::string name;
    size_t data = block.find("data: ");
    if (block.rfind("event: ", 0) == 0) name = block.substr(7, block.find('\n') - 7);
    events.emplace_back(name, json::parse(block.substr(data + 6)));
  }
  return events;
}

std::vector<json> ndjson(const std::string& out) {
  std::vector<json> lines;
  for (size_t at = 0; at < out.size();) {
    const size_t stop = out.find('\n', at);
    lines.push_back(json::parse(out.substr(at, stop - at)));
    at = stop + 1;
  }
  return lines;
}

TEST(ReplyEvents, EachEngineEventIsTypedPartsThroughTheParserAndTheEndCarriesTheCalls) {
  auto ch = std::make_shared<RequestChannel>();
  std::vector<std::string> logged;
  auto events = events_over(ch, tool_parser(), [&](const StreamEvent& e) { logged.push_back(e.finish_reason); });
  for (const auto& piece : kToolReply) ch->push(token(piece));
  std::vector<ReplyEvent> got;
  EXPECT_EQ(events->poll(got), StreamStep::More);  // no end yet
  ASSERT_EQ(got.size(), kToolReply.size());       // one typed event per engine event, held-back ones too
  std::string reasoning, content;
  for (const auto& e : got) {
    EXPECT_FALSE(e.end());
    EXPECT_TRUE(e.part.calls.empty());  // calls come at the end
    EXPECT_TRUE(e.engine.has_token);    // the token and its logprobs ride along
    reasoning += e.part.reasoning;
    content += e.part.content;
  }
  EXPECT_EQ(reasoning, "I should look it up.");
  ch->push(end("stop"));
  got.clear();
  EXPECT_EQ(events->poll(got), StreamStep::Done);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_TRUE(got[0].end());
  content += got[0].part.content;
  EXPECT_EQ(content, "Checking.\n");
  ASSERT_EQ(got[0].part.calls.size(), 2u);
  EXPECT_EQ(got[0].part.calls[0].name, "get_weather");
  EXPECT_EQ(got[0].part.calls[1].name, "get_time");
  EXPECT_EQ(got[0].finish_reason(), "tool_calls");  // stopped after calling
  EXPECT_EQ(got[0].engine.finish_reason, "stop");
  EXPECT_EQ(logged, std::vector<std::string>{"stop"});
  got.clear();
  EXPECT_EQ(events->poll(got), StreamStep::Done);  // over: nothing more
  EXPECT_TRUE(got.empty());
}

TEST(ReplyEvents, WithoutAParserTheTextIsContentAndALengthEndStaysLength) {
  auto ch = std::make_shared<RequestChannel>();
  auto events = events_over(ch, std::nullopt);
  ch->push(token("<think>not split"));
  ch->push(end("length", " held"));
  std::vector<ReplyEvent> got;
  EXPECT_EQ(events->poll(got), StreamStep::Done);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].part.content, "<think>not split");
  EXPECT_EQ(got[0].part.reasoning, "");
  EXPECT_EQ(got[1].part.content, " held");
  EXPECT_EQ(got[1].finish_reason(), "length");
  EXPECT_FALSE(events->parsed());
}

TEST(ReplyEvents, UsageCountsEachPromptOnceOverItsChoices) {
  // Two prompts x two choices (index = prompt * n + choice).
  std::vector<std::shared_ptr<RequestChannel>> chs;
  for (int i = 0; i < 4; i++) chs.push_back(std::make_shared<RequestChannel>());
  ReplyEvents events(chs, std::nullopt, nullptr);
  for (int i = 0; i < 4; i++) {
    StreamEvent e = end("stop");
    e.prompt_tokens = i < 2 ? 10 : 20;
    e.cached_tokens = i < 2 ? 4 : 0;
    e.completion_tokens = i + 1;
    chs[static_cast<size_t>(i)]->push(e);
  }
  std::vector<ReplyEvent> got;
  EXPECT_EQ(events.poll(got), StreamStep::Done);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[3].choice, 3u);
  const ReplyUsage u = events.usage(2);
  EXPECT_EQ(u.prompt, 30);
  EXPECT_EQ(u.cached, 4);
  EXPECT_EQ(u.completion, 1 + 2 + 3 + 4);
}

TEST(ReplyEvents, AFailedChoiceEndsTheReplyWithItsErrorAndCancelsTheOthers) {
  auto a = std::make_shared<RequestChannel>(), b = std::make_shared<RequestChannel>();
  ReplyEvents events({a, b}, std::nullopt, nullptr);
  a->push(token("x"));
  StreamEvent failed = end("error");
  failed.error = "device lost";
  a->push(failed);
  std::vector<ReplyEvent> got;
  EXPECT_EQ(events.poll(got), StreamStep::Done);
  EXPECT_EQ(events.error(), "device lost");
  ASSERT_EQ(got.size(), 1u);  // the text before the failure; the failure is error(), not an event
  EXPECT_TRUE(b->cancelled());
  EXPECT_FALSE(a->cancelled());  // it ended on its own
}

TEST(ReplyEvents, AChannelThatOverflowedIsACutNotAnEnd) {
  auto ch = std::make_shared<RequestChannel>();
  int ends = 0;
  auto events = events_over(ch, std::nullopt, [&](const StreamEvent&) { ends++; });
  for (size_t i = 0; i < RequestChannel::kMaxPending + 10; i++) ch->push(token("y"));
  ch->push(end("cancelled"));
  std::vector<ReplyEvent> got;
  EXPECT_EQ(events->poll(got), StreamStep::Abort);
  EXPECT_EQ(ends, 1);  // still logged
  for (const auto& e : got) EXPECT_FALSE(e.end());
}

TEST(AnthropicAnswer, WholeIsAMessageOfThinkingTextAndToolUseBlocksFromTheEvents) {
  auto ch = std::make_shared<RequestChannel>();
  AnthropicAnswer a(events_over(ch, tool_parser()), {"msg_1", "m", 10}, false);
  for (const auto& piece : kToolReply) ch->push(token(piece));
  EXPECT_FALSE(static_cast<DeferredResponse&>(a).poll().has_value());  // not ended yet
  ch->push(end("stop"));
  const std::optional<HttpResponse> r = static_cast<DeferredResponse&>(a).poll();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200);
  const json m = json::parse(r->body);
  EXPECT_EQ(m["id"], "msg_1");
  ASSERT_EQ(m["content"].size(), 4u);
  EXPECT_EQ(m["content"][0]["type"], "thinking");
  EXPECT_EQ(m["content"][0]["thinking"], "I should look it up.");
  EXPECT_EQ(m["content"][1], json({{"type", "text"}, {"text", "Checking."}}));  // trimmed beside the calls
  EXPECT_EQ(m["content"][2]["type"], "tool_use");
  EXPECT_EQ(m["content"][2]["name"], "get_weather");
  EXPECT_EQ(m["content"][2]["input"], json({{"city", "Paris"}}));  // an object, not JSON text
  EXPECT_EQ(m["content"][3]["input"], json::object());
  EXPECT_EQ(m["stop_reason"], "tool_use");
  EXPECT_TRUE(m["stop_sequence"].is_null());
  EXPECT_EQ(m["usage"]["input_tokens"], 6);  // the prompt less its cached prefix
  EXPECT_EQ(m["usage"]["cache_read_input_tokens"], 4);
  EXPECT_EQ(m["usage"]["output_tokens"], 3);
}

TEST(AnthropicAnswer, StreamedIsItsEventsInOrderAndAStopStringIsAStopSequence) {
  auto ch = std::make_shared<RequestChannel>();
  AnthropicAnswer a(events_over(ch, std::nullopt), {"msg_2", "m", 10}, true);
  ch->push(token("Hello"));
  ch->push(token(" there"));
  StreamEvent stopped = end("stop");
  stopped.stop_string = "\n\n";
  ch->push(stopped);
  std::string out;
  EXPECT_EQ(static_cast<BodyStream&>(a).poll(out), StreamStep::Done);
  const auto events = sse(out);
  std::vector<std::string> names;
  for (const auto& [name, data] : events) {
    names.push_back(name);
    EXPECT_EQ(data["type"], name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"message_start", "ping", "content_block_start", "content_block_delta",
                                             "content_block_delta", "content_block_stop", "message_delta",
                                             "message_stop"}));
  EXPECT_EQ(events[0].second["message"]["usage"]["input_tokens"], 10);
  EXPECT_EQ(events[3].second["delta"], json({{"type", "text_delta"}, {"text", "Hello"}}));
  EXPECT_EQ(events[6].second["delta"]["stop_reason"], "stop_sequence");
  EXPECT_EQ(events[6].second["delta"]["stop_sequence"], "\n\n");
  EXPECT_EQ(events[6].second["usage"]["output_tokens"], 3);
}

TEST(AnthropicAnswer, AFailureIsAnErrorEventStreamedAndAnAnthropicErrorWhole) {
  for (const bool stream : {true, false}) {
    auto ch = std::make_shared<RequestChannel>();
    AnthropicAnswer a(events_over(ch, std::nullopt), {"msg_3", "m", 10}, stream);
    StreamEvent failed = end("error");
    failed.error = "boom";
    ch->push(failed);
    if (stream) {
      std::string out;
      EXPECT_EQ(static_cast<BodyStream&>(a).poll(out), StreamStep::Done);
      const auto events = sse(out);
      ASSERT_EQ(events.back().first, "error");
      EXPECT_EQ(events.back().second["error"]["message"], "boom");
      for (const auto& e : events) EXPECT_NE(e.first, "message_stop");
    } else {
      const std::optional<HttpResponse> r = static_cast<DeferredResponse&>(a).poll();
      ASSERT_TRUE(r.has_value());
      EXPECT_EQ(r->status, 500);
      EXPECT_EQ(json::parse(r->body)["type"], "error");
      EXPECT_NE(json::parse(r->body)["error"]["message"].get<std::string>().find("boom"), std::string::npos);
    }
  }
}

TEST(OllamaAnswer, LinesCarryEachTokensLogprobEvenWhenItsTextWasHeldBack) {
  auto ch = std::make_shared<RequestChannel>();
  OllamaAnswer o(events_over(ch, std::nullopt), {"m", false, std::chrono::steady_clock::now(), true}, true);
  ch->push(token("Hi", -0.25f));
  ch->push(token("", -1.0f));  // a token whose text is held back (half a character)...
  ch->push(token("é", -2.0f));  // ...and comes with the next
  ch->push(end("length"));
  std::string out;
  EXPECT_EQ(static_cast<BodyStream&>(o).poll(out), StreamStep::Done);
  const std::vector<json> lines = ndjson(out);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["message"]["content"], "Hi");
  ASSERT_EQ(lines[0]["logprobs"].size(), 1u);
  EXPECT_EQ(lines[0]["logprobs"][0]["logprob"], -0.25);
  EXPECT_EQ(lines[0]["logprobs"][0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(lines[1]["message"]["content"], "é");
  ASSERT_EQ(lines[1]["logprobs"].size(), 2u);  // the held-back token's and its own
  EXPECT_EQ(lines[1]["logprobs"][0]["logprob"], -1.0);
  EXPECT_EQ(lines[2]["done"], true);
  EXPECT_EQ(lines[2]["done_reason"], "length");
  EXPECT_EQ(lines[2]["prompt_eval_count"], 10);
  EXPECT_EQ(lines[2]["eval_count"], 3);
}

TEST(OllamaAnswer, WholeFoldsThinkingContentAndCallsWithArgumentsAsObjects) {
  auto ch = std::make_shared<RequestChannel>();
  OllamaAnswer o(events_over(ch, tool_parser()), {"m", false, std::chrono::steady_clock::now(), false}, false);
  for (const auto& piece : kToolReply) ch->push(token(piece));
  ch->push(end("stop"));
  const std::optional<HttpResponse> r = static_cast<DeferredResponse&>(o).poll();
  ASSERT_TRUE(r.has_value());
  const json l = json::parse(r->body);
  EXPECT_EQ(l["done"], true);
  EXPECT_EQ(l["done_reason"], "stop");
  EXPECT_EQ(l["message"]["thinking"], "I should look it up.");
  ASSERT_EQ(l["message"]["tool_calls"].size(), 2u);
  EXPECT_EQ(l["message"]["tool_calls"][0]["function"]["arguments"], json({{"city", "Paris"}}));
  EXPECT_FALSE(l.contains("logprobs"));  // not asked for
}

TEST(ResponsesAnswer, OutputItemsFromTheEventsAndLogprobsOnlyOnTheMessage) {
  auto ch = std::make_shared<RequestChannel>();
  ResponseStore store(4);
  ResponsesIds ids{"resp_5", "m", 1, json::object(), nlohmann::ordered_json::array(), true, true, nullptr};
  ResponsesAnswer r(events_over(ch, ReplyParser(true, ToolCallFormat::None, true)), ids, false, store);
  ch->push(token("hmm", -1.0f));
  ch->push(token("</think>", -1.5f));
  ch->push(token("\n\n", -0.1f));  // the whitespace after the reasoning: not the message's text
  ch->push(token("Yes", -0.2f));
  ch->push(end("stop"));
  const std::optional<HttpResponse> got = static_cast<DeferredResponse&>(r).poll();
  ASSERT_TRUE(got.has_value());
  const json resp = json::parse(got->body);
  EXPECT_EQ(resp["status"], "completed");
  ASSERT_EQ(resp["output"].size(), 2u);
  EXPECT_EQ(resp["output"][0]["type"], "reasoning");
  EXPECT_EQ(resp["output"][0]["content"][0]["text"], "hmm");
  const json& part = resp["output"][1]["content"][0];
  EXPECT_EQ(part["text"], "Yes");
  // None of the reasoning's; the tokens held back before the message (the closing tag, the whitespace) go with
  // the text that released them.
  ASSERT_EQ(part["logprobs"].size(), 3u);
  EXPECT_EQ(part["logprobs"][0]["token"], "</think>");
  EXPECT_EQ(part["logprobs"][1]["logprob"].get<double>(), -0.1f);
  EXPECT_EQ(part["logprobs"][2]["token"], "Yes");
  EXPECT_EQ(resp["usage"]["input_tokens"], 10);
  EXPECT_EQ(resp["usage"]["input_tokens_details"]["cached_tokens"], 4);
  ASSERT_TRUE(store.get("resp_5").has_value());  // stored for previous_response_id
  EXPECT_EQ(store.get("resp_5")->conversation.back()["content"], "Yes");
}

TEST(InfillAnswer, AStopStringIsAWordStopAndTheCountsComeFromTheUsage) {
  auto ch = std::make_shared<RequestChannel>();
  InfillAnswer a(events_over(ch, std::nullopt), {"m", 2, "<fim>"}, false);
  ch->push(token("return x;"));
  StreamEvent stopped = end("stop");
  stopped.stop_string = "\n}";
  ch->push(stopped);
  const std::optional<HttpResponse> r = static_cast<DeferredResponse&>(a).poll();
  ASSERT_TRUE(r.has_value());
  const json o = json::parse(r->body);
  EXPECT_EQ(o["content"], "return x;");
  EXPECT_EQ(o["stop_type"], "word");
  EXPECT_EQ(o["stopping_word"], "\n}");
  EXPECT_EQ(o["tokens_predicted"], 3);
  EXPECT_EQ(o["tokens_evaluated"], 10);
  EXPECT_EQ(o["tokens_cached"], 4);
  EXPECT_EQ(o["input_extra_tokens_dropped"], 2);
}

}  // namespace
}  // namespace kestrel

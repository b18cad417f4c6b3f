#pragma once
// A request's reply as typed events: the one thing every API's answer is
// made from. The engine's events for each choice (one request per choice)
// are read from their channels and, for a chat with reasoning or tools,
// split by a ReplyParser into reasoning, content and tool calls; each front
// (OpenAI's chunks or whole body, Anthropic's events or message, Ollama's
// lines, a Responses object, an infill) only says them in its own shape —
// none reads another API's text back.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chat/reply_parser.h"
#include "serving/api/openai_api.h"
#include "serving/engine/serving_engine.h"
#include "serving/http/http_types.h"

namespace kestrel {

struct ReplyEvent {
  size_t choice = 0;
  // The engine's event: its final text, the token and its logprobs; at the end (engine.done), the finish reason,
  // the stop string that ended it and the counts.
  StreamEvent engine;
  // engine.text as the client reads it: reasoning, content and, at the end, the tool calls (without a parser, all
  // of it content). A parser may hold text back (a tag not yet complete): it comes in a later event's part.
  ReplyPart part;
  bool end() const { return engine.done; }
  // The end's reason as OpenAI names it: "tool_calls" where the reply called tools and then stopped, else the
  // engine's ("stop", "length", "cancelled").
  std::string finish_reason() const;
};

// Tokens over a request's choices: each prompt counted once (its n choices share it), completions summed.
struct ReplyUsage {
  int64_t prompt = 0, completion = 0, cached = 0;
};

// A choice's reply gathered whole (a non-streamed answer): its parts joined, the engine's text as it came, the end.
struct ReplyWhole {
  std::string text;  // the engine's text (what a completion without a parser answers)
  ReplyPart part;
  StreamEvent end;
  void add(const ReplyEvent& e);
  // The content as a message with calls carries it: trimmed around the calls, nullopt when only whitespace.
  std::optional<std::string> content_beside_calls() const;
};

class ReplyEvents {
 public:
  // One channel per choice; reply: the parser every choice's text goes through (a copy each), or none.
  // on_end: called once per choice with its end event (the request log), even when the client was cut off.
  ReplyEvents(std::vector<std::shared_ptr<RequestChannel>> channels, std::optional<ReplyParser> reply,
              std::function<void(const StreamEvent&)> on_end);
  void on_ready(std::function<void()> ready);
  // Appends the events produced since the last poll, in order within each choice. More while a choice runs; Done
  // once every choice ended or one failed (error() says why; the others are then cancelled); Abort when the client
  // read too slowly and its channel overflowed (the reply is cut, not a proper end).
  StreamStep poll(std::vector<ReplyEvent>& out);
  // The response is over: choices that did not finish are cancelled.
  void close();

  size_t choices() const { return choices_.size(); }
  bool parsed() const { return parsed_; }
  const std::string& error() const { return error_; }  // "" unless a choice failed
  // The usage over the choices' ends (valid once poll returned Done; n choices per prompt, in prompt order).
  ReplyUsage usage(int n = 1) const;

 private:
  struct Choice {
    std::shared_ptr<RequestChannel> channel;
    std::optional<ReplyParser> reply;
    bool finished = false;
    StreamEvent end{};
  };
  std::vector<Choice> choices_;
  std::function<void(const StreamEvent&)> on_end_;
  bool parsed_ = false;
  std::optional<StreamStep> over_;  // set once it ended: what poll answers from then on
  std::string error_;
};

// A front's answer read from the events: read() polls them, calls on_event for each and on_done once at the end
// (not after a cut), and says what the transport should do; whole() turns a step into a whole answer.
class ReplyReader {
 public:
  explicit ReplyReader(std::shared_ptr<ReplyEvents> events) : events_(std::move(events)) {}
  virtual ~ReplyReader() = default;

 protected:
  StreamStep read(std::string& out);
  virtual void on_event(const ReplyEvent& e, std::string& out) = 0;
  // A choice failed (error_ says why): nothing more is read; on_done follows.
  virtual void on_error(std::string& /*out*/) {}
  virtual void on_done(std::string& out) = 0;
  // Nothing until the reply ends, then the body `answer` gives, or the failure in the API's shape.
  std::optional<HttpResponse> whole(StreamStep s, const std::function<std::string()>& answer,
                                    HttpResponse (*failure)(const ApiError&)) const;
  ReplyUsage usage() const { return events_->usage(); }

  std::shared_ptr<ReplyEvents> events_;
  std::string error_;  // the generation's failure ("" while none)

 private:
  bool done_ = false;
};

}  // namespace kestrel

#pragma once
// OpenAI's Responses API (/v1/responses), read into a chat ask. A body's
// `input` (a string, or items: messages, function_call,
// function_call_output, reasoning) and `instructions` become chat messages,
// its flat function `tools` the chat's, `text.format` a response_format,
// `reasoning.effort` the template's effort (or, for a template with only a
// thinking switch, off for "none"/"minimal"), `max_output_tokens` the limit.
// The answer is the reply's events said as a response object of output
// items (reasoning, message, function_call) or its event stream
// (response.created ... response.completed). A response is kept (unless
// `store: false`) in a bounded in-memory store, so a later request's
// `previous_response_id` continues its conversation (and GET
// /v1/responses/{id} returns it); an unknown or evicted id is a 404 naming it.
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "serving/http/http_types.h"
#include "serving/api/openai_api.h"
#include "serving/api/completion_ask.h"
#include "serving/api/reply_events.h"

namespace kestrel {

// Responses kept for previous_response_id: the oldest goes first once `capacity` are kept.
class ResponseStore {
 public:
  explicit ResponseStore(size_t capacity) : capacity_(capacity) {}
  struct Entry {
    nlohmann::ordered_json conversation;  // the chat messages up to and including its output (no instructions)
    nlohmann::json response;              // the response object as answered
  };
  void put(const std::string& id, Entry e);
  std::optional<Entry> get(const std::string& id) const;
  size_t capacity() const { return capacity_; }

 private:
  size_t capacity_;
  mutable std::mutex mutex_;
  std::map<std::string, Entry> entries_;
  std::deque<std::string> order_;
};

struct ResponsesRequest {
  CompletionAsk ask;                    // the chat it asks for
  nlohmann::ordered_json conversation;  // its messages without the instructions (what a later request continues)
  nlohmann::json echo;                  // the request's fields a response object repeats (model, tools, ...)
  bool store = true;
  bool logprobs = false;  // include: message.output_text.logprobs
};

// Throws ApiError naming the field (404 for an unknown previous_response_id).
ResponsesRequest responses_ask(const nlohmann::ordered_json& body, const ResponseStore& store, const ApiContext& ctx);

struct ResponsesIds {
  std::string id;  // "resp_7"
  std::string model;
  int64_t created_at = 0;
  nlohmann::json echo;
  nlohmann::ordered_json conversation;
  bool store = true;
  bool logprobs = false;
  std::function<int64_t(const std::string&)> count_tokens;  // the reasoning's tokens, for usage
};

// The answer from the reply's events: the event stream (stream: true) or
// the response object once it is complete; either way stored when asked.
class ResponsesAnswer : public BodyStream, public DeferredResponse, ReplyReader {
 public:
  ResponsesAnswer(std::shared_ptr<ReplyEvents> events, ResponsesIds ids, bool stream, ResponseStore& store)
      : ReplyReader(std::move(events)), ids_(std::move(ids)), stream_(stream), store_(store) {}
  void on_ready(std::function<void()> ready) override { events_->on_ready(std::move(ready)); }
  StreamStep poll(std::string& out) override;
  std::optional<HttpResponse> poll() override;
  void close(bool) override { events_->close(); }

 private:
  StreamStep step(std::string& out);
  void on_event(const ReplyEvent& e, std::string& out) override;
  void on_done(std::string& out) override;
  void event(const char* type, nlohmann::json data, std::string& out);
  // Output items: the one being written, opened and closed as the kind of text changes.
  void open_item(const std::string& kind, std::string& out, const nlohmann::json& call = nullptr);
  void close_item(std::string& out);
  nlohmann::json response(const char* status) const;

  ResponsesIds ids_;
  bool stream_;
  ResponseStore& store_;
  std::string pending_ws_;  // whitespace content not yet part of a message (the template's layout around calls)
  bool started_ = false;
  int64_t sequence_ = 0;
  nlohmann::json output_ = nlohmann::json::array();  // finished items
  nlohmann::json item_;                              // the open item (null: none)
  std::string item_kind_;                            // "reasoning", "message", "function_call"
  std::string text_;                                 // the open item's text so far
  nlohmann::json logprobs_ = nlohmann::json::array();          // the open message item's
  nlohmann::json pending_logprobs_ = nlohmann::json::array();  // tokens whose text is not yet out (held back, whitespace)
  std::string finish_reason_ = "stop";
  int64_t reasoning_tokens_ = 0;
  int items_ = 0;
};

}  // namespace kestrel

#pragma once
// Ollama's API (/api/chat, /api/generate and the model listings clients
// probe) over the chat and completions routes. A body is checked field by
// field into a completion ask: `options` as sampling fields
// (num_predict as max_tokens, repeat_penalty, stop, seed, ...; options that
// only place the model — num_gpu, num_thread, use_mmap — are accepted, and
// sampling options Kestrel does not implement are a 400 unless they ask for
// their neutral value), `format` (json or a schema) as response_format,
// `think` as the template's switch or reasoning effort. The answer is the
// reply's events said as Ollama's NDJSON lines (stream: true, its
// default) or one object, ending with done, done_reason and the counts and
// durations Ollama reports (nanoseconds). Errors: {"error": "..."}.
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "serving/http/http_types.h"
#include "serving/api/openai_api.h"
#include "serving/api/completion_ask.h"
#include "serving/api/reply_events.h"

namespace kestrel {

// The API version Kestrel's answers follow (Ollama's release numbering, which clients compare), for /api/version.
constexpr const char* kOllamaApiVersion = "0.12.0";

struct OllamaRequest {
  CompletionAsk ask;  // a chat, or (/api/generate with raw) a completion of the prompt as it is; model: as asked
  int64_t num_ctx = 0;  // options.num_ctx (0: not given): the prompt and generation must fit in it
};

// generate: an /api/generate body (prompt, system, raw), else /api/chat's (messages, tools).
// Throws ApiError naming the field.
OllamaRequest ollama_ask(const nlohmann::ordered_json& body, const ApiContext& ctx, bool generate);

// A model name as Ollama clients send it ("name" or "name:tag"): the served name it means, or "".
std::string ollama_model_name(const std::string& requested, const std::vector<std::string>& served);

// {"error": message} with the status.
HttpResponse ollama_error_response(const ApiError& e);

// An RFC 3339 time with nanoseconds, as Ollama writes created_at.
std::string ollama_time(std::chrono::system_clock::time_point t);

struct OllamaIds {
  std::string model;
  bool generate = false;  // answers carry `response` (and `thinking`) rather than `message`
  std::chrono::steady_clock::time_point arrival;
  bool logprobs = false;  // each token's logprob (and alternatives) on the line that carries it
};

// The answer from the reply's events: one NDJSON line per piece of text,
// thinking or tool calls, then the final line with the counts and
// durations; whole, the same folded into one object.
class OllamaAnswer : public BodyStream, public DeferredResponse, ReplyReader {
 public:
  OllamaAnswer(std::shared_ptr<ReplyEvents> events, OllamaIds ids, bool stream)
      : ReplyReader(std::move(events)), ids_(std::move(ids)), stream_(stream) {}
  void on_ready(std::function<void()> ready) override { events_->on_ready(std::move(ready)); }
  StreamStep poll(std::string& out) override { return read(out); }  // stream: true
  std::optional<HttpResponse> poll() override;                        // stream: false
  void close(bool) override { events_->close(); }

 private:
  // Appends an NDJSON line (stream) or folds the event into the whole answer.
  void on_event(const ReplyEvent& e, std::string& out) override;
  void on_error(std::string& out) override;
  void on_done(std::string& out) override;
  nlohmann::json line(const std::string& content, const std::string& thinking, const nlohmann::json& calls,
                      const nlohmann::json& logprobs) const;
  nlohmann::json final_line();

  OllamaIds ids_;
  bool stream_;
  std::string content_, thinking_, done_reason_ = "stop";  // whole: the answer so far
  nlohmann::json calls_ = nlohmann::json::array();
  nlohmann::json logprobs_ = nlohmann::json::array();  // not yet sent (stream), or all of them (whole)
  std::chrono::steady_clock::time_point first_token_{};
};

}  // namespace kestrel

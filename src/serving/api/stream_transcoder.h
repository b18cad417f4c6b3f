#pragma once
// Another API's answer made from the OpenAI stream (CompletionStream): its
// server-sent chunks are read as they come and handed over parsed, so an
// API's answer (Anthropic's events, Ollama's lines, a Responses object, an
// infill) is only how it says each chunk again.
#include <functional>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>

#include "serving/http/http_types.h"
#include "serving/api/openai_api.h"

namespace kestrel {

class StreamTranscoder {
 public:
  explicit StreamTranscoder(std::shared_ptr<BodyStream> chat) : chat_(std::move(chat)) {}
  virtual ~StreamTranscoder() = default;

 protected:
  // Polls the chat stream: on_chunk for each chunk with choices, on_error for a failure (then nothing more is
  // read), on_done once at its end ([DONE], or the stream ending without one). Usage chunks fill usage_.
  // Returns Done once on_done has run.
  StreamStep read(std::string& out);
  virtual void on_chunk(const nlohmann::json& chunk, std::string& out) = 0;
  virtual void on_error(std::string& /*out*/) {}
  virtual void on_done(std::string& out) = 0;
  bool done() const { return done_; }
  // A whole answer from a step of the stream (`s`: read's, or a caller's own first step): nothing until it
  // ends, then the body `answer` gives, or the error in the API's shape (`failure`) if it failed.
  std::optional<HttpResponse> whole(StreamStep s, const std::function<std::string()>& answer,
                                    HttpResponse (*failure)(const ApiError&)) const;

  struct Usage {
    int64_t prompt = 0, completion = 0, cached = 0;
  };
  std::shared_ptr<BodyStream> chat_;
  Usage usage_;
  std::string error_;  // the generation's failure ("" while none)

 private:
  std::string pending_;
  bool done_ = false, stopped_ = false;
};

}  // namespace kestrel

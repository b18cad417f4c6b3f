#pragma once
// Another API's answer made from the OpenAI stream (CompletionStream): its
// server-sent chunks are read as they come and handed over parsed, so an
// API's answer (Anthropic's events, Ollama's lines, a Responses object, an
// infill) is only how it says each chunk again.
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "serving/http_types.h"

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

#pragma once
// A streamed completion as server-sent events: (chat: a first chunk with the
// role), one chunk per generated token (as OpenAI and vLLM stream, so a
// client times every token even when several arrive at once), the final
// chunk with finish_reason and usage (and, if asked, a usage-only chunk as
// OpenAI sends it), then [DONE]. A client that goes away cancels its
// request at the engine's next step.
#include <functional>
#include <memory>

#include "serving/completion_body.h"
#include "serving/http_types.h"
#include "serving/serving_engine.h"

namespace kestrel {

class CompletionStream {
 public:
  // on_end: called once with the request's end event (for the request log).
  CompletionStream(std::shared_ptr<RequestChannel> channel, CompletionIds ids, bool want_logprobs, bool include_usage,
                   std::function<void(const StreamEvent&)> on_end);
  // Sends what the engine has produced (waiting up to 100 ms for it).
  StreamStep step(ChunkSink& sink);
  // The response is over: a request that did not finish is cancelled.
  void close();

 private:
  bool send_chunk(ChunkSink& sink, const nlohmann::json& choice);
  nlohmann::json text_choice(const std::string& text, const nlohmann::json& logprobs, const nlohmann::json& finish) const;
  StreamStep finish(ChunkSink& sink, const StreamEvent& end);
  StreamStep abort();

  std::shared_ptr<RequestChannel> channel_;
  CompletionIds ids_;
  bool want_logprobs_, include_usage_;
  std::function<void(const StreamEvent&)> on_end_;
  bool started_ = false, finished_ = false;
};

}  // namespace kestrel

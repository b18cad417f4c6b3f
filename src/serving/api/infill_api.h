#pragma once
// llama-server's /infill, as editor plugins (llama.vim, llama.vscode) call
// it: code completion by fill-in-the-middle with the model's FIM tokens. The
// prompt is laid out as llama.cpp lays it out (the repo-level pattern where
// the vocabulary has <|fim_repo|>/<|file_sep|>):
//   [input_extra chunks][BOS]<FIM_PRE>input_prefix prompt<FIM_SUF>input_suffix<FIM_MID>
// and generated as a completion; the answer is llama-server's: `content`,
// `stop`, the token counts and why it stopped, streamed as server-sent
// events of such objects. Nothing of the prefix or suffix is cut (llama.cpp
// trims them to a batch): a prompt too long for the context is a 400. The
// input_extra chunks are context as much as fits: the oldest are dropped
// first, and the answer says how many tokens were (input_extra_tokens_dropped).
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "serving/http/http_types.h"
#include "serving/api/openai_api.h"
#include "serving/api/completion_ask.h"
#include "serving/api/reply_events.h"

namespace kestrel {

struct InfillRequest {
  CompletionAsk ask;  // a completion of the laid-out token ids
  int64_t extra_dropped = 0;
  std::string prompt_text;  // the laid-out prompt as text (llama-server's `prompt` field)
};

// Throws ApiError naming the field; a model without FIM tokens is a 400 naming the missing ones.
InfillRequest infill_ask(const nlohmann::ordered_json& body, const ApiContext& ctx);

struct InfillIds {
  std::string model;
  int64_t extra_dropped = 0;  // -1: not /infill (POST /completion's answer, the same shape without the field)
  std::string prompt_text;
};

// The answer from the reply's events: llama-server's objects, streamed (a piece of content each, then the final
// one) or whole; /infill's and /completion's (llama_completion_api.h).
class InfillAnswer : public BodyStream, public DeferredResponse, ReplyReader {
 public:
  InfillAnswer(std::shared_ptr<ReplyEvents> events, InfillIds ids, bool stream)
      : ReplyReader(std::move(events)), ids_(std::move(ids)), stream_(stream) {}
  void on_ready(std::function<void()> ready) override { events_->on_ready(std::move(ready)); }
  StreamStep poll(std::string& out) override { return read(out); }
  std::optional<HttpResponse> poll() override;
  void close(bool) override { events_->close(); }

 private:
  void on_event(const ReplyEvent& e, std::string& out) override;
  void on_error(std::string& out) override;
  void on_done(std::string& out) override;
  nlohmann::json final_object() const;

  InfillIds ids_;
  bool stream_;
  std::string content_, finish_ = "stop", stop_word_;
};

}  // namespace kestrel

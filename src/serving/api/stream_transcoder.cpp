#include "serving/api/stream_transcoder.h"

namespace kestrel {

StreamStep StreamTranscoder::read(std::string& out) {
  if (done_) return StreamStep::Done;
  std::string chat_out;
  const StreamStep s = chat_->poll(chat_out);
  pending_ += chat_out;
  bool end = false;
  for (size_t at; !end && !stopped_ && (at = pending_.find("\n\n")) != std::string::npos;) {
    const std::string event = pending_.substr(0, at);
    pending_.erase(0, at + 2);
    if (event.rfind("data: ", 0) != 0) continue;
    const std::string data = event.substr(6);
    if (data == "[DONE]") {
      end = true;
      break;
    }
    const nlohmann::json c = nlohmann::json::parse(data, nullptr, false);
    if (c.is_discarded()) continue;
    if (c.contains("error")) {
      error_ = c["error"].is_object() ? c["error"].value("message", "generation failed") : "generation failed";
      on_error(out);
      stopped_ = true;
      continue;
    }
    if (c.contains("usage") && c["usage"].is_object()) {
      const nlohmann::json& u = c["usage"];
      usage_.prompt = u.value("prompt_tokens", int64_t{0});
      usage_.completion = u.value("completion_tokens", int64_t{0});
      if (u.contains("prompt_tokens_details")) usage_.cached = u["prompt_tokens_details"].value("cached_tokens", int64_t{0});
    }
    if (c.contains("choices") && !c["choices"].empty()) on_chunk(c, out);
  }
  if (end || stopped_ || s != StreamStep::More) {
    if (s == StreamStep::Abort && !end && !stopped_) return StreamStep::Abort;
    done_ = true;
    on_done(out);
    return StreamStep::Done;
  }
  return StreamStep::More;
}

std::optional<HttpResponse> StreamTranscoder::whole(StreamStep s, const std::function<std::string()>& answer,
                                                    HttpResponse (*failure)(const ApiError&)) const {
  if (s == StreamStep::More) return std::nullopt;
  if (s == StreamStep::Abort) return failure({500, "the request ended early", "", "server_error", ""});
  if (!error_.empty()) return failure({500, "generation failed: " + error_, "", "server_error", ""});
  return json_response(answer());
}

}  // namespace kestrel

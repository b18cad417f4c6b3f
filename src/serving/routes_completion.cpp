// POST /v1/completions and /v1/chat/completions: admission (draining, a
// full queue), parsing, submission to the engine, then the whole answer or
// a stream of server-sent events.
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "serving/api_routes.h"
#include "serving/completion_body.h"
#include "serving/completion_stream.h"
#include "serving/openai_api.h"

namespace kestrel {

using json = nlohmann::json;

HttpResponse ApiRoutes::rejected(const ApiError& e) {
  metrics_.add("kestrel_requests_total", 1, "rejected");
  return error_response(e);
}

HttpResponse ApiRoutes::completion(const HttpRequest& req, bool chat) {
  if (draining_) {
    HttpResponse r = error_response({503, "the server is shutting down", "", "server_error", "unavailable"});
    r.headers.emplace_back("Retry-After", "5");
    return r;
  }
  ParsedRequest p;
  try {
    const ApiContext ctx{*engine_.engine().tokenizer, c_.model_name, c_.chat_template, engine_.n_ctx(),
                         c_.allow_special_in_content};
    p = parse_completion_request(ctx, req.body, chat);
  } catch (const ApiError& e) {
    return rejected(e);
  } catch (const std::exception& e) {
    return rejected({400, e.what(), "", "invalid_request_error", ""});
  }
  const int priority = p.serve.priority;
  std::shared_ptr<RequestChannel> ch;
  try {
    ch = engine_.submit(p.serve);
  } catch (const Error& e) {
    return rejected({400, e.what(), "max_tokens", "invalid_request_error", "context_length_exceeded"});
  }
  if (!ch) {
    HttpResponse r = rejected({503, "the request queue is full; retry shortly", "", "server_error", "queue_full"});
    r.headers.emplace_back("Retry-After", "1");
    return r;
  }
  const int64_t id = next_id_++;
  const CompletionIds ids{fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", id), chat, unix_seconds(), c_.model_name};
  const bool want_logprobs = p.serve.top_logprobs >= 0;

  if (p.stream) {
    auto stream = std::make_shared<CompletionStream>(ch, ids, want_logprobs, p.include_usage_chunk,
                                                     [this, id, priority](const StreamEvent& end) {
                                                       log_request(id, priority, end);
                                                     });
    HttpResponse r;
    r.content_type = "text/event-stream";
    r.headers.emplace_back("Cache-Control", "no-cache");
    r.stream = [stream](ChunkSink& sink) { return stream->step(sink); };
    r.on_close = [stream](bool) { stream->close(); };
    return r;
  }
  std::string text;
  Logprobs lp(chat);
  for (;;) {
    for (auto& e : ch->pop(1000)) {
      text += e.text;
      if (want_logprobs) lp.add(e);
      if (!e.done) continue;
      log_request(id, priority, e);
      if (e.finish_reason == "error")
        return error_response({500, "generation failed: " + e.error, "", "server_error", ""});
      return json_response(whole_completion_body(ids, text, want_logprobs ? lp.result() : json(nullptr), e));
    }
  }
}

void ApiRoutes::log_request(int64_t id, int priority, const StreamEvent& end) {
  std::lock_guard lock(log_mutex_);
  if (c_.log_json) {
    const json line = {{"id", id},
                       {"priority", priority},
                       {"prompt_tokens", end.prompt_tokens},
                       {"cached_tokens", end.cached_tokens},
                       {"completion_tokens", end.completion_tokens},
                       {"finish_reason", end.finish_reason},
                       {"queue_ms", end.queue_ms},
                       {"ttft_ms", end.ttft_ms},
                       {"e2e_ms", end.e2e_ms}};
    fmt::print(stderr, "{}\n", json_text(line));
  } else {
    fmt::print(stderr,
               "[kestrel] request {} priority {}: {} prompt ({} cached) + {} generated tokens, {} (queue {:.1f} ms, "
               "first token {:.1f} ms, total {:.1f} ms)\n",
               id, priority, end.prompt_tokens, end.cached_tokens, end.completion_tokens, end.finish_reason,
               end.queue_ms, end.ttft_ms, end.e2e_ms);
  }
}

}  // namespace kestrel

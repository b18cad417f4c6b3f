#include "serving/http_server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "serving/openai_api.h"

namespace kestrel {
namespace {

using json = nlohmann::json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(api_error_body(e), "application/json");
}

json usage_json(const StreamEvent& end) {
  json u = {{"prompt_tokens", end.prompt_tokens},
            {"completion_tokens", end.completion_tokens},
            {"total_tokens", end.prompt_tokens + end.completion_tokens}};
  u["prompt_tokens_details"] = {{"cached_tokens", end.cached_tokens}};
  return u;
}

// The OpenAI finish reasons: ours are "stop", "length", "cancelled", "error".
json finish_json(const std::string& reason) { return reason.empty() ? json(nullptr) : json(reason); }

// Logprobs of a run of token events, in the completions or the chat shape.
struct Logprobs {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
  json chat = json::array();
  size_t offset = 0;
  void add(const StreamEvent& e, bool chat_shape) {
    if (!e.has_token) return;
    if (chat_shape) {
      json alts = json::array();
      for (const auto& t : e.top) alts.push_back({{"token", t.text}, {"logprob", t.logprob}});
      chat.push_back({{"token", e.token.text}, {"logprob", e.token.logprob}, {"top_logprobs", alts}});
    } else {
      tokens.push_back(e.token.text);
      token_logprobs.push_back(e.token.logprob);
      json alts = json::object();
      for (const auto& t : e.top) alts[t.text] = t.logprob;
      top.push_back(alts);
      offsets.push_back(offset);
      offset += e.text.size();
    }
  }
  json result(bool chat_shape) const {
    if (chat_shape) return {{"content", chat}};
    return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
  }
  void clear() { *this = Logprobs{}; }
};

}  // namespace

HttpServer::HttpServer(ServingEngine& engine, ServerMetrics& metrics, const HttpServerConfig& config)
    : engine_(engine), metrics_(metrics), c_(config), svr_(std::make_unique<httplib::Server>()) {
  const int threads = c_.http_threads;
  svr_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  svr_->set_payload_max_length(c_.max_body_bytes);
  svr_->set_tcp_nodelay(true);  // each streamed token leaves at once (Nagle would hold small chunks)
  svr_->set_read_timeout(30, 0);
  svr_->set_write_timeout(30, 0);
  routes();
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::bind() {
  int port = c_.port;
  if (port == 0)
    port = svr_->bind_to_any_port(c_.host);
  else if (!svr_->bind_to_port(c_.host, port))
    port = -1;
  if (port < 0)
    throw Error(fmt::format("cannot listen on {}:{} (in use, or not an address of this machine)", c_.host, c_.port));
  return port;
}

void HttpServer::run() { svr_->listen_after_bind(); }
void HttpServer::stop() { svr_->stop(); }

void HttpServer::log_request(int64_t id, int priority, const StreamEvent& end) {
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
    fmt::print(stderr, "{}\n", dump(line));
  } else {
    fmt::print(stderr,
               "[kestrel] request {} priority {}: {} prompt ({} cached) + {} generated tokens, {} (queue {:.1f} ms, "
               "first token {:.1f} ms, total {:.1f} ms)\n",
               id, priority, end.prompt_tokens, end.cached_tokens, end.completion_tokens, end.finish_reason,
               end.queue_ms, end.ttft_ms, end.e2e_ms);
  }
}

void HttpServer::routes() {
  auto& s = *svr_;
  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    res.status = draining_ ? 503 : 200;
    res.set_content(dump({{"status", draining_ ? "shutting down" : "ok"}}), "application/json");
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    json m = {{"id", c_.model_name},
              {"object", "model"},
              {"created", unix_time()},
              {"owned_by", "kestrel"},
              {"max_model_len", engine_.n_ctx()}};
    res.set_content(dump({{"object", "list"}, {"data", json::array({m})}}), "application/json");
  });

  // llama.cpp-style tokenizer endpoints ("content"; vLLM's "prompt" also accepted):
  // loadtest uses them to build prompts of exact token lengths.
  s.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    try {
      const json j = json::parse(req.body);
      const char* key = j.contains("content") ? "content" : "prompt";
      if (!j.is_object() || !j.contains(key) || !j[key].is_string())
        return send_error(res, {400, "'content' must be a string", "content", "invalid_request_error", ""});
      const bool special = j.value("add_special", true);
      const auto ids = engine_.engine().tokenizer->encode(j[key].get<std::string>(), special, false);
      res.set_content(dump({{"tokens", ids}, {"count", ids.size()}}), "application/json");
    } catch (const std::exception& e) {
      send_error(res, {400, std::string("bad /tokenize body: ") + e.what(), "", "invalid_request_error", ""});
    }
  });
  s.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    try {
      const json j = json::parse(req.body);
      const auto ids = j.at("tokens").get<std::vector<int32_t>>();
      const auto n = static_cast<int32_t>(engine_.engine().tokenizer->vocab().size());
      for (int32_t t : ids)
        if (t < 0 || t >= n) return send_error(res, {400, "token id out of range", "tokens", "invalid_request_error", ""});
      res.set_content(dump({{"content", engine_.engine().tokenizer->decode(ids)}}), "application/json");
    } catch (const std::exception& e) {
      send_error(res, {400, std::string("bad /detokenize body: ") + e.what(), "tokens", "invalid_request_error", ""});
    }
  });

  auto completion = [this](const httplib::Request& req, httplib::Response& res, bool chat) {
    if (draining_) {
      res.set_header("Retry-After", "5");
      return send_error(res, {503, "the server is shutting down", "", "server_error", "unavailable"});
    }
    ParsedRequest p;
    try {
      const ApiContext ctx{*engine_.engine().tokenizer, c_.model_name, c_.chat_template, engine_.n_ctx()};
      p = parse_completion_request(ctx, req.body, chat);
    } catch (const ApiError& e) {
      metrics_.add("kestrel_requests_total", 1, "rejected");
      return send_error(res, e);
    } catch (const std::exception& e) {
      metrics_.add("kestrel_requests_total", 1, "rejected");
      return send_error(res, {400, e.what(), "", "invalid_request_error", ""});
    }
    const int priority = p.serve.priority;
    std::shared_ptr<RequestChannel> ch;
    try {
      ch = engine_.submit(p.serve);
    } catch (const Error& e) {
      metrics_.add("kestrel_requests_total", 1, "rejected");
      return send_error(res, {400, e.what(), "max_tokens", "invalid_request_error", "context_length_exceeded"});
    }
    if (!ch) {
      metrics_.add("kestrel_requests_total", 1, "rejected");
      res.set_header("Retry-After", "1");
      return send_error(res, {503, "the request queue is full; retry shortly", "", "server_error", "queue_full"});
    }
    const int64_t id = next_id_++;
    const std::string rid = fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", id);
    const int64_t created = unix_time();
    const bool want_logprobs = p.serve.top_logprobs >= 0;

    if (!p.stream) {
      std::string text;
      Logprobs lp;
      for (;;) {
        bool done = false;
        StreamEvent end;
        for (auto& e : ch->pop(1000)) {
          text += e.text;
          if (want_logprobs) lp.add(e, chat);
          if (e.done) done = true, end = std::move(e);
        }
        if (!done) continue;
        log_request(id, priority, end);
        if (end.finish_reason == "error")
          return send_error(res, {500, "generation failed: " + end.error, "", "server_error", ""});
        json choice = {{"index", 0},
                       {"finish_reason", finish_json(end.finish_reason)},
                       {"logprobs", want_logprobs ? lp.result(chat) : json(nullptr)}};
        if (chat)
          choice["message"] = {{"role", "assistant"}, {"content", text}};
        else
          choice["text"] = text;
        json body = {{"id", rid},
                     {"object", chat ? "chat.completion" : "text_completion"},
                     {"created", created},
                     {"model", c_.model_name},
                     {"choices", json::array({choice})},
                     {"usage", usage_json(end)}};
        res.set_content(dump(body), "application/json");
        return;
      }
    }

    // Server-sent events: one chunk per batch of new text, then the final
    // chunk (finish_reason and usage) and [DONE]. A client that goes away
    // cancels its request at the engine's next step.
    struct StreamState {
      bool started = false, finished = false;
    };
    auto st = std::make_shared<StreamState>();
    const bool include_usage = p.include_usage_chunk;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [=, this](size_t, httplib::DataSink& sink) {
          if (st->finished) return false;
          auto chunk = [&](const json& choice, const json& usage) {
            json c = {{"id", rid},
                      {"object", chat ? "chat.completion.chunk" : "text_completion"},
                      {"created", created},
                      {"model", c_.model_name},
                      {"choices", json::array({choice})}};
            if (!usage.is_null()) c["usage"] = usage;
            const std::string line = "data: " + dump(c) + "\n\n";
            return sink.write(line.data(), line.size());
          };
          if (chat && !st->started) {
            st->started = true;
            if (!chunk({{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"finish_reason", nullptr}},
                       nullptr)) {
              ch->cancel();
              return false;
            }
          }
          // One chunk per generated token (as OpenAI and vLLM stream), so a
          // client times every token even when several arrive at once.
          auto events = ch->pop(100);
          std::string text;
          Logprobs lp;
          auto text_choice = [&](const json& finish) {
            json c = {
                {"index", 0}, {"finish_reason", finish}, {"logprobs", want_logprobs ? lp.result(chat) : json(nullptr)}};
            if (chat)
              c["delta"] = text.empty() && !finish.is_null() ? json::object() : json{{"content", text}};
            else
              c["text"] = text;
            return c;
          };
          StreamEvent end;
          bool done = false;
          for (auto& e : events) {
            if (e.done) {
              done = true;
              end = std::move(e);
              break;
            }
            text = e.text;
            lp.clear();
            if (want_logprobs) lp.add(e, chat);
            if (text.empty() && !(want_logprobs && e.has_token)) continue;  // held back (UTF-8 or a possible stop string)
            if (!chunk(text_choice(nullptr), nullptr)) {
              ch->cancel();
              return false;
            }
          }
          if (!done) {
            if (!sink.is_writable()) ch->cancel();  // the client left while we waited
            return sink.is_writable();
          }
          text = end.text;  // what the end released (held-back text)
          lp.clear();
          st->finished = true;
          log_request(id, priority, end);
          if (end.finish_reason == "error") {
            const std::string line =
                "data: " + api_error_body({500, "generation failed: " + end.error, "", "server_error", ""}) + "\n\n";
            sink.write(line.data(), line.size());
          } else {
            // Usage rides on the final chunk (and, if asked, on a usage-only chunk as OpenAI sends it).
            chunk(text_choice(finish_json(end.finish_reason)), usage_json(end));
            if (include_usage) {
              json c = {{"id", rid},
                        {"object", chat ? "chat.completion.chunk" : "text_completion"},
                        {"created", created},
                        {"model", c_.model_name},
                        {"choices", json::array()},
                        {"usage", usage_json(end)}};
              const std::string line = "data: " + dump(c) + "\n\n";
              sink.write(line.data(), line.size());
            }
          }
          const std::string fin = "data: [DONE]\n\n";
          sink.write(fin.data(), fin.size());
          sink.done();
          return true;
        },
        [ch, st](bool) {
          if (!st->finished) ch->cancel();
        });
  };
  s.Post("/v1/completions", [completion](const httplib::Request& q, httplib::Response& r) { completion(q, r, false); });
  s.Post("/v1/chat/completions",
         [completion](const httplib::Request& q, httplib::Response& r) { completion(q, r, true); });

  // Anything else (unknown path, wrong method, oversized body): an OpenAI-style error body.
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string msg = fmt::format("{} {}: ", req.method, req.path);
    if (res.status == 404)
      msg += "no such endpoint";
    else if (res.status == 413)
      msg += "the body is too large";
    else if (res.status == 405)
      msg += "method not allowed";
    else
      msg += fmt::format("status {}", res.status);
    res.set_content(api_error_body({res.status, msg, "", "invalid_request_error", ""}), "application/json");
  });
}

}  // namespace kestrel

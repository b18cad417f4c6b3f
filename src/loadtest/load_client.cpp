#include "loadtest/load_client.h"

#include <fmt/format.h>
#include <httplib.h>

#include <regex>

#include "core/error.h"

namespace kestrel {

using json = nlohmann::json;

namespace {
using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

}  // namespace

Endpoint parse_url(const std::string& url) {
  static const std::regex re(R"(^http://([^/:]+)(?::([0-9]+))?(/.*)?$)");
  std::smatch m;
  if (!std::regex_match(url, m, re))
    throw Error(fmt::format("--url '{}' is not http://HOST[:PORT][/PATH] (https is not supported)", url));
  Endpoint e;
  e.host = m[1];
  e.port = m[2].matched ? std::stoi(m[2]) : 80;
  if (e.port <= 0 || e.port > 65535) throw Error(fmt::format("--url '{}': port out of range", url));
  e.base_path = m[3].matched ? m[3].str() : "";
  while (!e.base_path.empty() && e.base_path.back() == '/') e.base_path.pop_back();
  if (e.base_path.size() >= 3 && e.base_path.compare(e.base_path.size() - 3, 3, "/v1") == 0)
    e.base_path.resize(e.base_path.size() - 3);  // the API paths add /v1 themselves
  return e;
}

namespace {
std::unique_ptr<httplib::Client> connect(const Endpoint& ep, double timeout_s) {
  auto c = std::make_unique<httplib::Client>(ep.host, ep.port);
  const auto secs = static_cast<time_t>(timeout_s);
  const auto usecs = static_cast<time_t>((timeout_s - static_cast<double>(secs)) * 1e6);
  c->set_connection_timeout(std::min<time_t>(secs, 10), secs >= 10 ? 0 : usecs);
  c->set_read_timeout(secs, usecs);  // a stall longer than this ends the request as a timeout
  c->set_write_timeout(secs, usecs);
  c->set_keep_alive(true);
  c->set_tcp_nodelay(true);
  if (!ep.api_key.empty()) c->set_bearer_token_auth(ep.api_key.c_str());
  return c;
}
}  // namespace

LoadClient::LoadClient(const Endpoint& ep, double timeout_s)
    : ep_(ep), timeout_s_(timeout_s), http_(connect(ep, timeout_s)) {}

LoadClient::~LoadClient() = default;

RequestRecord LoadClient::stream(const std::string& path, const json& body, Clock::time_point start) {
  RequestRecord r;
  httplib::Request req;
  req.method = "POST";
  req.path = ep_.base_path + path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");
  auto sent = Clock::now();
  r.start_s = seconds(start, sent);
  bool answered = false;  // any byte of the answer (its status line) arrived
  req.response_handler = [&](const httplib::Response&) {
    answered = true;
    return true;
  };
  std::string buffer, error_body;
  Clock::time_point last_chunk{};
  bool done = false, stream_error = false, timed_out = false;
  int64_t chunks = 0;
  auto on_event = [&](const std::string& data, Clock::time_point at) {
    if (data == "[DONE]") {
      done = true;
      return;
    }
    json j;
    try {
      j = json::parse(data);
    } catch (const std::exception&) {
      stream_error = true;
      r.error_detail = "not JSON: " + data.substr(0, 80);
      return;
    }
    if (j.contains("error")) {
      stream_error = true;
      r.error_detail = j["error"].is_object() ? j["error"].value("message", "error") : j["error"].dump();
      return;
    }
    if (j.contains("usage") && j["usage"].is_object()) {
      r.prompt_tokens = j["usage"].value("prompt_tokens", int64_t{0});
      r.output_tokens = j["usage"].value("completion_tokens", int64_t{0});
      r.usage_reported = true;
      const json& details = j["usage"].value("prompt_tokens_details", json::object());
      if (details.is_object()) r.cached_tokens = details.value("cached_tokens", int64_t{0});
    }
    // llama-server's own count of the prompt tokens its cache served.
    if (j.contains("timings") && j["timings"].is_object() && j["timings"].contains("cache_n") && r.cached_tokens == 0)
      r.cached_tokens = j["timings"].value("cache_n", int64_t{0});
    if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return;
    const json& c = j["choices"][0];
    std::string text;
    if (c.contains("text") && c["text"].is_string()) text = c["text"].get<std::string>();
    if (c.contains("delta") && c["delta"].is_object() && c["delta"].contains("content") &&
        c["delta"]["content"].is_string())
      text = c["delta"]["content"].get<std::string>();
    if (text.empty()) return;
    r.text += text;
    if (chunks == 0)
      r.ttft_s = seconds(sent, at);
    else
      r.itl_s.push_back(seconds(last_chunk, at));
    last_chunk = at;
    chunks++;
  };
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    const auto at = Clock::now();
    if (seconds(sent, at) > timeout_s_) {
      timed_out = true;
      return false;
    }
    buffer.append(data, len);
    if (error_body.size() < 4096) error_body.append(data, std::min<size_t>(len, 4096));
    for (size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
      std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      for (size_t at_line = 0; at_line < event.size();) {
        size_t eol = event.find('\n', at_line);
        if (eol == std::string::npos) eol = event.size();
        std::string line = event.substr(at_line, eol - at_line);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.rfind("data:", 0) == 0) on_event(line.substr(line.size() > 5 && line[5] == ' ' ? 6 : 5), at);
        at_line = eol + 1;
      }
    }
    return true;
  };
  auto res = http_->send(req);
  // A kept-alive connection the server had already closed as idle fails at once, before any byte of an answer:
  // the request never reached the server. Resent once on a fresh connection (as browsers and HTTP libraries
  // do), so the server is not blamed for the client's stale socket.
  if (!res && !answered && reused_ && !timed_out &&
      (res.error() == httplib::Error::Read || res.error() == httplib::Error::Write)) {
    http_ = connect(ep_, timeout_s_);
    reused_ = false;
    buffer.clear();
    error_body.clear();
    sent = Clock::now();
    res = http_->send(req);
  }
  r.e2e_s = seconds(sent, Clock::now());
  if (res) reused_ = true;
  if (!res) {
    // A read that ran into the timeout is a stall; anything sooner, a dropped or refused connection.
    r.error = timed_out || r.e2e_s >= 0.95 * timeout_s_ ? "timeout" : "connection";
    r.error_detail = httplib::to_string(res.error());
    http_ = connect(ep_, timeout_s_);  // a fresh connection for the next request
    reused_ = false;
    return r;
  }
  if (res->status >= 400) {
    r.error = res->status >= 500 ? "http 5xx" : "http 4xx";
    r.error_detail = fmt::format("{}: {}", res->status, error_body.substr(0, 200));
    return r;
  }
  if (stream_error) {
    r.error = "stream";
    return r;
  }
  if (!done || chunks == 0) {
    r.error = "stream";
    r.error_detail = done ? "no content" : "the stream ended without [DONE]";
    return r;
  }
  if (!r.usage_reported) r.output_tokens = chunks;
  r.ok = true;
  return r;
}

std::optional<std::vector<int64_t>> LoadClient::tokenize(const std::string& text, bool add_special) {
  for (const char* key : {"content", "prompt"}) {
    auto res = http_->Post(ep_.base_path + "/tokenize", json{{key, text}, {"add_special", add_special}}.dump(),
                           "application/json");
    if (!res || res->status != 200) continue;
    reused_ = true;
    try {
      const json j = json::parse(res->body);
      if (j.contains("tokens") && j["tokens"].is_array()) {
        std::vector<int64_t> ids;
        for (const auto& t : j["tokens"])
          ids.push_back(t.is_number_integer() ? t.get<int64_t>() : t.at("id").get<int64_t>());
        return ids;
      }
    } catch (const std::exception&) {
    }
  }
  return std::nullopt;
}

std::optional<int64_t> LoadClient::count_tokens(const std::string& text) {
  const auto ids = tokenize(text, true);
  if (!ids) return std::nullopt;
  return static_cast<int64_t>(ids->size());
}

}  // namespace kestrel

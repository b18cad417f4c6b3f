#pragma once
// What a route sees and answers, apart from the HTTP library that carries
// it: routes are plain functions of an HttpRequest, so the transport under
// them (Boost.Beast, http_server.cpp) can change without touching a route.
//
// A route never waits for the engine: an answer that is not ready yet (a
// completion) is a DeferredResponse or a BodyStream the transport polls when
// told more is ready, so a connection costs memory, not a thread.
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kestrel {

using Headers = std::vector<std::pair<std::string, std::string>>;

// ASCII case-insensitive equality (HTTP field names, tokens).
bool iequals_ascii(std::string_view a, std::string_view b);

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // without the query string
  std::string body;
  Headers headers{};
  // When the transport accepted the request (its first byte): queue times
  // are measured from here.
  std::chrono::steady_clock::time_point arrival = std::chrono::steady_clock::now();
  std::string query{};  // the query string (after '?', without it), raw
  // A header's value (names compare case-insensitively); empty if absent.
  std::string_view header(std::string_view name) const;
  // A query parameter's value ("action" of "?action=save"; %XX and '+' decoded); empty if absent.
  std::string query_param(std::string_view name) const;
};

// What a polled producer says after each poll.
enum class StreamStep {
  More,   // poll again after the next ready()
  Done,   // the body is complete
  Abort,  // stop: the request ended without a proper end (cancelled, overflowed)
};

// Something the engine produces over time. `ready` is called from any
// thread (maybe at once, maybe many times) whenever poll() may have more;
// close() is called exactly once when the response is over.
class Pending {
 public:
  virtual ~Pending() = default;
  virtual void on_ready(std::function<void()> ready) = 0;
  // completed: the whole answer reached the socket.
  virtual void close(bool completed) = 0;
};

// A body sent piece by piece (server-sent events) after the head.
class BodyStream : public Pending {
 public:
  // Appends what is ready to `out`.
  virtual StreamStep poll(std::string& out) = 0;
};

struct HttpResponse;

// A whole response known only later (a completion that is not streamed).
class DeferredResponse : public Pending {
 public:
  virtual std::optional<HttpResponse> poll() = 0;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  Headers headers;
  std::shared_ptr<BodyStream> stream;      // set: the body is streamed (chunked) after the head
  std::shared_ptr<DeferredResponse> later;  // set: the whole response comes later (the rest is unused)
};

// A response with a JSON body (already serialized).
inline HttpResponse json_response(std::string body, int status = 200) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

}  // namespace kestrel

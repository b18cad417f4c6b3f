#pragma once
// What a route sees and answers, apart from the HTTP library that carries
// it: routes are plain functions of an HttpRequest, so the transport under
// them (cpp-httplib today) can be replaced without touching one route.
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kestrel {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // without the query string
  std::string body;
};

// Where a streamed body goes, piece by piece.
class ChunkSink {
 public:
  virtual ~ChunkSink() = default;
  // False when the client is gone (nothing more will reach it).
  virtual bool write(std::string_view bytes) = 0;
  virtual bool writable() const = 0;
};

// What a stream producer says after each call.
enum class StreamStep {
  More,   // call again
  Done,   // the body is complete
  Abort,  // stop: the client left or cannot be written to
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  // Set for a streamed body: called until it returns Done or Abort; each call
  // may wait (briefly) for more to send.
  std::function<StreamStep(ChunkSink&)> stream;
  // Called once when the response is over, with whether the stream completed.
  std::function<void(bool completed)> on_close;
};

// A response with a JSON body (already serialized).
inline HttpResponse json_response(std::string body, int status = 200) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

}  // namespace kestrel

#pragma once
// The HTTP shell around the ServingEngine (cpp-httplib): parses and
// validates on its own threads, queues, and streams each request's events
// back as they arrive. Endpoints: POST /v1/completions, POST
// /v1/chat/completions (both with "stream": true as server-sent events),
// GET /v1/models, /health, /metrics.
#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "serving/chat_template.h"
#include "serving/metrics.h"
#include "serving/serving_engine.h"

namespace httplib {
class Server;
}

namespace kestrel {

struct HttpServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (see bind())
  std::string model_name;
  ChatTemplate chat_template = ChatTemplate::ChatML;
  size_t max_body_bytes = 4 << 20;
  int http_threads = 32;
  bool log_json = false;  // one JSON line per request on stderr, else a short text line
};

class HttpServer {
 public:
  HttpServer(ServingEngine& engine, ServerMetrics& metrics, const HttpServerConfig& config);
  ~HttpServer();

  int bind();   // binds the socket; returns the port (useful with port 0). Throws Error on failure.
  void run();   // serves until stop()
  void stop();  // from any thread
  void set_draining() { draining_ = true; }  // /health says so and new requests get 503

 private:
  void routes();
  void log_request(int64_t id, int priority, const StreamEvent& end);

  ServingEngine& engine_;
  ServerMetrics& metrics_;
  HttpServerConfig c_;
  std::unique_ptr<httplib::Server> svr_;
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> next_id_{1};
  std::mutex log_mutex_;
};

}  // namespace kestrel

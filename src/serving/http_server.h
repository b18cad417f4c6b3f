#pragma once
// The HTTP transport (cpp-httplib): sockets, threads, limits and timeouts,
// and the translation of its requests and responses to the routing table's
// (router.h, api_routes.h), which holds every endpoint. Issue 18 replaces
// this file's library; the routes do not change.
#include <memory>
#include <string>

#include "serving/api_routes.h"
#include "serving/router.h"

namespace httplib {
class Server;
}

namespace kestrel {

struct HttpServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (see bind())
  ApiConfig api;
  size_t max_body_bytes = 4 << 20;
  int http_threads = 32;
};

class HttpServer {
 public:
  HttpServer(ServingEngine& engine, ServerMetrics& metrics, const HttpServerConfig& config);
  ~HttpServer();

  int bind();   // binds the socket; returns the port (useful with port 0). Throws Error on failure.
  void run();   // serves until stop()
  void stop();  // from any thread
  void set_draining() { api_.set_draining(); }  // /health says so and new requests get 503

 private:
  HttpServerConfig c_;
  ApiRoutes api_;
  Router router_;
  std::unique_ptr<httplib::Server> svr_;
};

}  // namespace kestrel

#pragma once
// The HTTP transport: Boost.Beast over Asio, asynchronous (a connection
// costs memory, not a thread), optionally TLS (OpenSSL through Asio). It
// owns sockets, deadlines, limits and strict framing (http_framing.h),
// checks access (access_policy.h), and hands each request to the routing
// table (router.h, api_routes.h), which holds every endpoint. Beast is
// known only to http_server.cpp and http_connection.cpp.
#include <atomic>
#include <functional>
#include <cstddef>
#include <memory>
#include <string>

#include "serving/api/api_routes.h"
#include "serving/http/access_policy.h"
#include "serving/http/readiness.h"
#include "serving/http/router.h"

namespace kestrel {

// Every bound a client can press against (docs/serving.md, "Limits").
struct HttpLimits {
  size_t max_body_bytes = 4 << 20;      // chunked bodies too
  size_t max_header_bytes = 16 << 10;   // request line and all fields
  int max_header_fields = 100;
  int max_connections = 4096;           // beyond: 503 and close (held below the open-file limit)
  double header_timeout_s = 10;         // from a request's first byte to the end of its head
  double idle_timeout_s = 30;           // a kept-alive connection between requests
  double body_timeout_s = 60;           // from the end of the head to the end of the body
  double write_timeout_s = 30;          // each write to a client (one not reading is dropped)
};

struct HttpServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (see bind())
  AccessConfig access;
  HttpLimits limits;
  int io_threads = 2;       // network threads (any number of connections)
  int worker_threads = 2;   // parsing and tokenizing requests
  std::string tls_cert_file, tls_key_file;  // both set: HTTPS only
};

// Started before the model loads: until serve() it answers /health, /ready (503, the load's stage) and
// /metrics, and every other route with a 503 naming the stage; serve() puts the API's routes in place.
class HttpServer {
 public:
  // Throws Error for an unreadable TLS certificate or key.
  HttpServer(ServerMetrics& metrics, const HttpServerConfig& config);
  ~HttpServer();

  int bind();   // binds the socket; returns the port (useful with port 0). Throws Error on failure.
  void run();   // serves until stop()
  void stop();  // from any thread: stops accepting, lets responses under way finish (a few seconds), ends run()
  // The model is loaded: every endpoint of api_routes.h from now on, and /ready says ready. Once.
  void serve(ServingEngine& engine, ApiConfig api);
  // The same for any table: `install` adds its routes after the probes; `on_draining` runs on set_draining.
  void serve(const std::function<void(Router&)>& install, std::function<void()> on_draining);
  // Where routes run their slow parts: the transport's worker threads.
  Offload offload();
  // /ready says why (503) and new requests get 503.
  void set_draining(const std::string& why);
  Readiness& readiness() { return readiness_; }
  // The table in use (the startup one until serve()): what GET /openapi.json is checked against.
  std::shared_ptr<const Router> routes() const { return router_.get(); }

  struct Impl;

 private:
  // The routes every table has: /health and /ready.
  void add_probes(Router& router);
  HttpServerConfig c_;
  ServerMetrics& metrics_;
  Readiness readiness_;
  std::unique_ptr<ApiRoutes> api_;
  std::function<void()> on_draining_;
  bool serving_ = false;
  RouterSlot router_;
  AccessPolicy access_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kestrel

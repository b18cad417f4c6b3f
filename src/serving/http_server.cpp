#include "serving/http_server.h"

#include <fmt/format.h>
#include <httplib.h>

#include "core/error.h"
#include "serving/openai_api.h"

namespace kestrel {
namespace {

class HttplibSink : public ChunkSink {
 public:
  explicit HttplibSink(httplib::DataSink& sink) : sink_(sink) {}
  bool write(std::string_view bytes) override { return sink_.write(bytes.data(), bytes.size()); }
  bool writable() const override { return sink_.is_writable(); }

 private:
  httplib::DataSink& sink_;
};

// Hands one request to the routing table and its answer back to httplib.
void serve(const Router& router, const httplib::Request& req, httplib::Response& res) {
  // HEAD is GET without the body (httplib drops it).
  HttpResponse out = router.handle({req.method == "HEAD" ? "GET" : req.method, req.path, req.body});
  res.status = out.status;
  for (const auto& [name, value] : out.headers) res.set_header(name, value);
  if (!out.stream) return res.set_content(out.body, out.content_type);
  res.set_chunked_content_provider(
      out.content_type,
      [stream = std::move(out.stream)](size_t, httplib::DataSink& sink) {
        HttplibSink s(sink);
        switch (stream(s)) {
          case StreamStep::More: return true;
          case StreamStep::Done: sink.done(); return true;
          case StreamStep::Abort: break;
        }
        return false;
      },
      [close = std::move(out.on_close)](bool completed) {
        if (close) close(completed);
      });
}

// What httplib answers itself (an oversized body, a malformed request line):
// an OpenAI-style error body too.
void library_error(const httplib::Request& req, httplib::Response& res) {
  if (!res.body.empty()) return;
  std::string msg = fmt::format("{} {}: ", req.method, req.path);
  msg += res.status == 413 ? "the body is too large" : fmt::format("status {}", res.status);
  res.set_content(api_error_body({res.status, msg, "", "invalid_request_error", ""}), "application/json");
}

}  // namespace

HttpServer::HttpServer(ServingEngine& engine, ServerMetrics& metrics, const HttpServerConfig& config)
    : c_(config), api_(engine, metrics, config.api), svr_(std::make_unique<httplib::Server>()) {
  api_.install(router_);
  const int threads = c_.http_threads;
  svr_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  svr_->set_payload_max_length(c_.max_body_bytes);
  svr_->set_tcp_nodelay(true);  // each streamed token leaves at once (Nagle would hold small chunks)
  svr_->set_read_timeout(30, 0);
  svr_->set_write_timeout(30, 0);
  auto handler = [this](const httplib::Request& req, httplib::Response& res) { serve(router_, req, res); };
  svr_->Get(".*", handler);
  svr_->Post(".*", handler);
  svr_->Put(".*", handler);
  svr_->Patch(".*", handler);
  svr_->Delete(".*", handler);
  svr_->Options(".*", handler);
  svr_->set_error_handler(library_error);
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

}  // namespace kestrel

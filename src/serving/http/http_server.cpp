#include "serving/http/http_server.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <chrono>
#include <optional>
#include <thread>
#include <vector>

#include "core/error.h"
#include "serving/http/http_connection.h"

namespace kestrel {

namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

// Connections need file descriptors: the soft limit goes up to the hard one,
// and the cap stays below it (listener, model file, log, engine's own).
int connection_cap(int wanted) {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return wanted;
  if (r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
    getrlimit(RLIMIT_NOFILE, &r);
  }
  const auto room = static_cast<int64_t>(r.rlim_cur) - 128;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(wanted, room)));
}

// Logs a connection coroutine that ended by an exception (never expected:
// each catches its own) instead of letting it escape io_context::run().
void log_failure(std::exception_ptr e) {
  if (!e) return;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    fmt::print(stderr, "[kestrel] connection failed: {}\n", x.what());
  }
}

}  // namespace

struct HttpServer::Impl {
  explicit Impl(const HttpServerConfig& c)
      : ioc(std::max(1, c.io_threads)), acceptor(ioc), workers(static_cast<size_t>(std::max(1, c.worker_threads))) {}

  net::io_context ioc;
  tcp::acceptor acceptor;
  net::thread_pool workers;
  std::optional<net::ssl::context> tls;
  std::atomic<int> connections{0}, busy{0};
  std::atomic<bool> stopping{false};
  int max_connections = 0;
  std::optional<ConnectionShared> shared;

  net::awaitable<void> accept_loop() {
    for (;;) {
      tcp::socket socket(net::make_strand(ioc));
      boost::system::error_code ec;
      co_await acceptor.async_accept(socket, net::redirect_error(net::use_awaitable, ec));
      if (ec) {
        if (!acceptor.is_open() || stopping) co_return;
        // Out of descriptors or memory: pause instead of spinning.
        net::steady_timer pause(ioc, std::chrono::milliseconds(50));
        co_await pause.async_wait(net::redirect_error(net::use_awaitable, ec));
        continue;
      }
      auto ex = socket.get_executor();
      if (connections.load() >= max_connections) {
        shared->metrics.add("kestrel_http_errors_total", 1, "connection_limit");
        net::co_spawn(ex, refuse_connection(std::move(socket), tls.has_value()), log_failure);
        continue;
      }
      shared->metrics.set("kestrel_http_connections", ++connections);
      socket.set_option(tcp::no_delay(true), ec);  // each streamed token leaves at once
      if (tls)
        net::co_spawn(ex, serve_tls(std::move(socket), *tls, *shared), log_failure);
      else
        net::co_spawn(ex, serve_plain(std::move(socket), *shared), log_failure);
    }
  }
};

HttpServer::HttpServer(ServerMetrics& metrics, const HttpServerConfig& config)
    : c_(config), metrics_(metrics), access_(config.access), impl_(std::make_unique<Impl>(config)) {
  impl_->max_connections = connection_cap(c_.limits.max_connections);
  impl_->shared.emplace(ConnectionShared{router_, access_, c_.limits, metrics, impl_->connections, impl_->busy,
                                         impl_->stopping});
  if (c_.tls_cert_file.empty() != c_.tls_key_file.empty())
    throw Error("TLS needs both --ssl-cert-file and --ssl-key-file");
  if (!c_.tls_cert_file.empty()) {
    impl_->tls.emplace(net::ssl::context::tls_server);
    auto& ctx = *impl_->tls;
    ctx.set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                    net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 | net::ssl::context::no_tlsv1_1);
    boost::system::error_code ec;
    ctx.use_certificate_chain_file(c_.tls_cert_file, ec);
    if (ec) throw Error(fmt::format("cannot use the TLS certificate '{}': {}", c_.tls_cert_file, ec.message()));
    ctx.use_private_key_file(c_.tls_key_file, net::ssl::context::pem, ec);
    if (ec) throw Error(fmt::format("cannot use the TLS key '{}': {}", c_.tls_key_file, ec.message()));
  }
  // Until the model is ready: the probes, the metrics, and a 503 naming the load's stage for the rest.
  auto startup = std::make_shared<Router>();
  add_probes(*startup);
  startup->add("GET", "/metrics", [this](const HttpRequest&) {
    HttpResponse r = json_response(metrics_.render());
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    return r;
  });
  for (const char* method : {"GET", "POST", "DELETE"}) {
    startup->add(method, "/*", [this](const HttpRequest& r) { return readiness_.unavailable(r); });
    if (std::string_view(method) != "DELETE")
      startup->add(method, "/", [this](const HttpRequest& r) { return readiness_.unavailable(r); });
  }
  router_.set(std::move(startup));
}

void HttpServer::add_probes(Router& router) {
  router.add("GET", "/health", [this](const HttpRequest&) { return readiness_.health(); });
  router.add("GET", "/ready", [this](const HttpRequest&) { return readiness_.ready_response(); });
}

void HttpServer::serve(ServingEngine& engine, ApiConfig api) {
  if (api_) throw Error("the server's API is in place already");
  api_ = std::make_unique<ApiRoutes>(engine, metrics_, std::move(api));
  api_->set_offload(offload());
  serve([this](Router& r) { api_->install(r); }, [this] { api_->set_draining(); });
}

void HttpServer::serve(const std::function<void(Router&)>& install, std::function<void()> on_draining) {
  if (serving_) throw Error("the server's API is in place already");
  serving_ = true;
  auto routes = std::make_shared<Router>();
  add_probes(*routes);
  install(*routes);
  on_draining_ = std::move(on_draining);
  router_.set(std::move(routes));
  readiness_.ready();
}

Offload HttpServer::offload() {
  return [this](std::function<void()> task) { net::post(impl_->workers, std::move(task)); };
}

void HttpServer::set_draining(const std::string& why) {
  readiness_.draining(why);
  if (on_draining_) on_draining_();
}

HttpServer::~HttpServer() {
  stop();
  impl_->workers.join();
}

int HttpServer::bind() {
  boost::system::error_code ec;
  const auto where = [&] { return fmt::format("cannot listen on {}:{}", c_.host, c_.port); };
  const net::ip::address address = net::ip::make_address(c_.host == "localhost" ? "127.0.0.1" : c_.host, ec);
  if (ec) throw Error(fmt::format("{}: '{}' is not an IP address of this machine", where(), c_.host));
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(c_.port));
  auto& a = impl_->acceptor;
  a.open(endpoint.protocol(), ec);
  // SO_REUSEADDR only lets a restart reuse a port in TIME_WAIT; a port
  // another process listens on still fails (no SO_REUSEPORT).
  if (!ec) a.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) a.bind(endpoint, ec);
  if (!ec) a.listen(net::socket_base::max_listen_connections, ec);  // SOMAXCONN
  if (ec) {
    a.close();
    throw Error(fmt::format("{}: {}{}", where(), ec.message(),
                            ec == net::error::address_in_use ? " (another process listens there)" : ""));
  }
  return a.local_endpoint().port();
}

void HttpServer::run() {
  if (!impl_->acceptor.is_open()) bind();
  net::co_spawn(impl_->ioc, impl_->accept_loop(), log_failure);
  std::vector<std::thread> more;
  for (int i = 1; i < c_.io_threads; i++) more.emplace_back([this] { impl_->ioc.run(); });
  impl_->ioc.run();
  for (auto& t : more) t.join();
}

void HttpServer::stop() {
  if (impl_->stopping.exchange(true)) return;
  net::post(impl_->ioc, [this] {
    boost::system::error_code ec;
    impl_->acceptor.close(ec);
  });
  // Responses under way get a few seconds to reach their clients.
  for (int waited = 0; impl_->busy.load() > 0 && waited < 5000; waited += 10)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  impl_->ioc.stop();
}

}  // namespace kestrel

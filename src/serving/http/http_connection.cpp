#include "serving/http/http_connection.h"

#include <fmt/format.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "serving/http/http_framing.h"
#include "serving/api/openai_api.h"

namespace kestrel {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using beast::error_code;

namespace {

constexpr auto kAwait = net::use_awaitable;

std::chrono::steady_clock::duration seconds_of(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

// Wakes the connection's coroutine from any thread (the engine's, a
// worker's): trigger() posts to the connection's strand.
class Wakeup : public std::enable_shared_from_this<Wakeup> {
 public:
  explicit Wakeup(net::any_io_executor ex) : timer_(std::move(ex)) {}
  std::function<void()> trigger() {
    return [w = weak_from_this(), ex = timer_.get_executor()] {
      net::post(ex, [w] {
        if (auto self = w.lock()) {
          self->ready_ = true;
          self->timer_.cancel();
        }
      });
    };
  }
  net::awaitable<void> wait() {
    while (!ready_) {
      timer_.expires_after(std::chrono::hours(1));
      error_code ec;
      co_await timer_.async_wait(net::redirect_error(kAwait, ec));
    }
    ready_ = false;
  }

 private:
  net::steady_timer timer_;
  bool ready_ = false;
};

// What a read error answers (0: nothing, the connection just closes; after
// a timeout Beast has closed the socket already).
int status_for(const error_code& ec) {
  if (ec == http::error::header_limit) return 431;
  if (ec == http::error::body_limit) return 413;
  if (ec == beast::error::timeout || ec == http::error::end_of_stream || ec == net::error::eof ||
      ec == net::error::connection_reset || ec == net::error::operation_aborted || ec == net::ssl::error::stream_truncated)
    return 0;
  return 400;
}

const char* reason_for(int status) {
  switch (status) {
    case 413: case 431: return "too_large";
    case 505: case 501: case 417: return "unsupported";
    default: return "malformed";
  }
}

template <class Stream>
auto& tcp_of(Stream& s) {
  return beast::get_lowest_layer(s);
}

// A response as Beast writes it: status, our headers, keep-alive.
template <class Body>
void set_head(http::response<Body>& res, const HttpResponse& r, bool keep_alive) {
  res.version(11);
  res.result(static_cast<unsigned>(r.status));
  res.set(http::field::server, "kestrel");
  if (!r.content_type.empty()) res.set(http::field::content_type, r.content_type);
  for (const auto& [name, value] : r.headers) res.insert(name, value);
  res.keep_alive(keep_alive);
}

template <class Stream>
net::awaitable<bool> write_whole(Stream& s, HttpResponse& r, bool head_only, bool keep_alive, const HttpLimits& lim) {
  http::response<http::string_body> res;
  set_head(res, r, keep_alive);
  res.body() = std::move(r.body);
  res.prepare_payload();
  tcp_of(s).expires_after(seconds_of(lim.write_timeout_s));
  error_code ec;
  if (head_only) {
    http::response_serializer<http::string_body> sr(res);
    co_await http::async_write_header(s, sr, net::redirect_error(kAwait, ec));
  } else {
    co_await http::async_write(s, res, net::redirect_error(kAwait, ec));
  }
  co_return !ec;
}

// The head, then each piece the stream has as it comes, one write at a
// time; true when the stream ended properly and was all written.
template <class Stream>
net::awaitable<bool> write_stream(Stream& s, HttpResponse& r, bool head_only, bool keep_alive, const HttpLimits& lim) {
  std::shared_ptr<BodyStream> body = r.stream;
  http::response<http::empty_body> res;
  set_head(res, r, keep_alive);
  res.chunked(true);
  http::response_serializer<http::empty_body> sr(res);
  error_code ec;
  tcp_of(s).expires_after(seconds_of(lim.write_timeout_s));
  co_await http::async_write_header(s, sr, net::redirect_error(kAwait, ec));
  if (ec || head_only) {
    body->close(false);
    co_return !ec && head_only;
  }
  const net::any_io_executor ex = co_await net::this_coro::executor;
  auto wake = std::make_shared<Wakeup>(ex);
  body->on_ready(wake->trigger());
  std::string out;
  for (;;) {
    out.clear();
    const StreamStep step = body->poll(out);
    if (!out.empty()) {
      tcp_of(s).expires_after(seconds_of(lim.write_timeout_s));
      const auto chunk = http::make_chunk(net::buffer(out));
      co_await net::async_write(s, chunk, net::redirect_error(kAwait, ec));
      if (ec) break;
    }
    if (step == StreamStep::Done) {
      tcp_of(s).expires_after(seconds_of(lim.write_timeout_s));
      const auto last = http::make_chunk_last();
      co_await net::async_write(s, last, net::redirect_error(kAwait, ec));
      body->close(!ec);
      co_return !ec;
    }
    if (step == StreamStep::Abort) break;
    co_await wake->wait();
  }
  body->close(false);
  co_return false;  // an unterminated chunked body: the connection must close
}

// What a connection learns while its answer is computed.
struct Watch {
  bool done = false;  // the watching read has ended
  bool gone = false;  // ...because the client hung up
};

// Reads the connection while nothing else does, so that a client that hangs
// up before its answer is ready is noticed (and its request cancelled)
// instead of generating for nobody. Bytes of a pipelined next request are
// kept in the buffer for it. The read is started here, at once (not in a
// coroutine of its own that would start later, after a cancel meant for it).
template <class Stream>
void watch_connection(Stream& s, beast::flat_buffer& buffer, const net::any_io_executor& ex,
                      std::shared_ptr<Watch> watch, std::shared_ptr<Wakeup> wake) {
  s.async_read_some(buffer.prepare(4096),
                    net::bind_executor(ex, [&buffer, watch, wake](const error_code& ec, size_t n) {
                      if (!ec) buffer.commit(n);
                      watch->gone = ec && ec != net::error::operation_aborted;
                      watch->done = true;
                      wake->trigger()();
                    }));
}

// Until the response is known: an offloaded job, then (for a whole
// completion) the engine's end. Null when the client left meanwhile.
template <class Stream>
net::awaitable<std::optional<HttpResponse>> resolve(Stream& s, beast::flat_buffer& buffer, HttpResponse r) {
  if (!r.later) co_return r;
  const net::any_io_executor ex = co_await net::this_coro::executor;
  auto wake = std::make_shared<Wakeup>(ex);
  auto watch = std::make_shared<Watch>();
  tcp_of(s).expires_never();
  watch_connection(s, buffer, ex, watch, wake);
  bool gone = false;
  while (r.later && !gone) {
    std::shared_ptr<DeferredResponse> later = std::move(r.later);
    later->on_ready(wake->trigger());
    std::optional<HttpResponse> got;
    // (Nothing may throw out of here while the watch reads the connection.)
    auto poll = [&]() -> std::optional<HttpResponse> {
      try {
        return later->poll();
      } catch (const std::exception& e) {
        return internal_error_response(e);
      }
    };
    while (!(got = poll()) && !(gone = watch->gone)) co_await wake->wait();
    later->close(!gone);
    if (got) r = std::move(*got);
  }
  if (!watch->done) {  // stop watching before the connection is used again
    error_code ec;
    tcp_of(s).socket().cancel(ec);
    while (!watch->done) co_await wake->wait();
  }
  if (gone) {
    if (r.stream) r.stream->close(false);
    co_return std::nullopt;
  }
  co_return r;
}

// Closes after an error answer without resetting the connection under the
// client's feet: our side is shut, then what the client still sends (the
// rest of a body too large, say) is read and dropped, for at most 2 s and
// 16 MiB. Closing with unread input sends a reset, which can destroy the
// answer before the client reads it.
template <class Stream>
net::awaitable<void> linger_close(Stream& s) {
  error_code ec;
  tcp_of(s).socket().shutdown(tcp::socket::shutdown_send, ec);
  if (ec) co_return;
  tcp_of(s).expires_after(std::chrono::seconds(2));
  static thread_local char sink[65536];
  for (size_t dropped = 0; dropped < (16u << 20);) {
    dropped += co_await tcp_of(s).async_read_some(net::buffer(sink), net::redirect_error(kAwait, ec));
    if (ec) break;
  }
}

// (GCC 12 destroys temporaries inside a co_await expression twice: every
// argument of a coroutine call below is a named object, passed by value.)
template <class Stream>
net::awaitable<void> answer_error(Stream& s, int status, std::string message, ConnectionShared& sh) {
  sh.metrics.add("kestrel_http_errors_total", 1, reason_for(status));
  HttpResponse r = error_response({status, message, "", "invalid_request_error", ""});
  if (co_await write_whole(s, r, false, false, sh.limits)) co_await linger_close(s);
}

// The request parsed off the wire, in the routes' terms.
HttpRequest to_request(http::request_parser<http::string_body>& parser, Headers fields,
                       std::chrono::steady_clock::time_point arrival) {
  auto& m = parser.get();
  HttpRequest req;
  req.method = std::string(m.method_string());
  req.path = target_path(m.target());
  req.query = target_query(m.target());
  req.body = std::move(m.body());
  req.headers = std::move(fields);
  req.arrival = arrival;
  return req;
}

struct CountedOut {
  std::atomic<int>& n;
  ServerMetrics& metrics;
  const char* gauge;
  ~CountedOut() { metrics.set(gauge, --n); }
};

// One request off the connection; false when the connection must close.
template <class Stream>
net::awaitable<bool> serve_one(Stream& s, beast::flat_buffer& buffer, bool first, ConnectionShared& sh) {
  const HttpLimits& lim = sh.limits;
  error_code ec;
  if (buffer.size() == 0) {  // waiting for a request to begin
    tcp_of(s).expires_after(seconds_of(first ? lim.header_timeout_s : lim.idle_timeout_s));
    const size_t n = co_await s.async_read_some(buffer.prepare(4096), net::redirect_error(kAwait, ec));
    // A new connection that sends nothing is a slow client; a kept-alive one going quiet is not.
    if (ec == beast::error::timeout && first) sh.metrics.add("kestrel_http_errors_total", 1, "timeout");
    if (ec) co_return false;
    buffer.commit(n);
  }
  const auto arrival = std::chrono::steady_clock::now();
  http::request_parser<http::string_body> parser;
  parser.header_limit(static_cast<std::uint32_t>(lim.max_header_bytes));
  parser.body_limit(lim.max_body_bytes);
  tcp_of(s).expires_after(seconds_of(lim.header_timeout_s));
  co_await http::async_read_header(s, buffer, parser, net::redirect_error(kAwait, ec));
  if (ec) {
    if (ec == beast::error::timeout) sh.metrics.add("kestrel_http_errors_total", 1, "timeout");
    const int status = status_for(ec);
    std::string message = "bad request head: " + ec.message();
    if (status) co_await answer_error(s, status, std::move(message), sh);
    co_return false;
  }
  Headers fields;
  for (const auto& f : parser.get()) fields.emplace_back(std::string(f.name_string()), std::string(f.value()));
  const RequestHead head{static_cast<int>(parser.get().version()), parser.get().target(), &fields};
  if (auto problem = framing_problem(head, lim.max_header_fields)) {
    const int status = problem->status;
    std::string message = std::move(problem->message);
    co_await answer_error(s, status, std::move(message), sh);
    co_return false;
  }
  const std::string_view expect = parser.get()[http::field::expect];
  if (!expect.empty()) {
    if (!iequals_ascii(expect, "100-continue")) {
      std::string message = fmt::format("Expect '{}' is not supported", expect.substr(0, 32));
      co_await answer_error(s, 417, std::move(message), sh);
      co_return false;
    }
    static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    tcp_of(s).expires_after(seconds_of(lim.write_timeout_s));
    co_await net::async_write(s, net::buffer(kContinue), net::redirect_error(kAwait, ec));
    if (ec) co_return false;
  }
  tcp_of(s).expires_after(seconds_of(lim.body_timeout_s));
  co_await http::async_read(s, buffer, parser, net::redirect_error(kAwait, ec));
  if (ec) {
    if (ec == beast::error::timeout) sh.metrics.add("kestrel_http_errors_total", 1, "timeout");
    const int status = status_for(ec);
    std::string message = status == 413 ? fmt::format("the body is larger than {} bytes", lim.max_body_bytes)
                                        : "bad request body: " + ec.message();
    if (status) co_await answer_error(s, status, std::move(message), sh);
    co_return false;
  }

  sh.busy++;
  CountedOut busy{sh.busy, sh.metrics, "kestrel_http_requests_in_progress"};
  sh.metrics.set("kestrel_http_requests_in_progress", sh.busy.load());
  const bool keep_alive = parser.get().keep_alive();
  HttpRequest req = to_request(parser, std::move(fields), arrival);
  const bool head_only = req.method == "HEAD";
  if (head_only) req.method = "GET";  // HEAD is GET without the body
  HttpResponse res;
  if (auto denied = sh.access.check(req)) {
    if (denied->status == 401 || denied->status == 403) sh.metrics.add("kestrel_http_errors_total", 1, "denied");
    res = std::move(*denied);
  } else {
    std::optional<HttpResponse> resolved;
    try {
      HttpResponse routed = sh.router.get()->handle(req);
      resolved = co_await resolve(s, buffer, std::move(routed));
    } catch (const std::exception& e) {
      resolved = internal_error_response(e);
    }
    if (!resolved) co_return false;  // the client hung up: its request is cancelled, nothing to write
    res = std::move(*resolved);
    sh.access.decorate(req, res);
  }
  const bool again = keep_alive && !sh.stopping;
  bool ok = false;
  if (res.stream)
    ok = co_await write_stream(s, res, head_only, again, lim);
  else
    ok = co_await write_whole(s, res, head_only, again, lim);
  co_return ok && again;
}

template <class Stream>
net::awaitable<void> serve_stream(Stream& s, ConnectionShared& sh) {
  beast::flat_buffer buffer;
  for (bool first = true; !sh.stopping; first = false)
    if (!co_await serve_one(s, buffer, first, sh)) break;
}

}  // namespace

net::awaitable<void> serve_plain(tcp::socket socket, ConnectionShared& shared) {
  CountedOut open{shared.connections, shared.metrics, "kestrel_http_connections"};
  beast::tcp_stream s(std::move(socket));
  co_await serve_stream(s, shared);
  error_code ec;
  s.socket().shutdown(tcp::socket::shutdown_send, ec);
}

net::awaitable<void> serve_tls(tcp::socket socket, net::ssl::context& tls, ConnectionShared& shared) {
  CountedOut open{shared.connections, shared.metrics, "kestrel_http_connections"};
  beast::ssl_stream<beast::tcp_stream> s(beast::tcp_stream(std::move(socket)), tls);
  error_code ec;
  tcp_of(s).expires_after(seconds_of(shared.limits.header_timeout_s));
  co_await s.async_handshake(net::ssl::stream_base::server, net::redirect_error(kAwait, ec));
  if (ec) {
    shared.metrics.add("kestrel_http_errors_total", 1, "tls_handshake");
    co_return;
  }
  co_await serve_stream(s, shared);
  tcp_of(s).expires_after(std::chrono::seconds(2));
  co_await s.async_shutdown(net::redirect_error(kAwait, ec));
}

net::awaitable<void> refuse_connection(tcp::socket socket, bool tls) {
  beast::tcp_stream s(std::move(socket));
  if (!tls) {
    static const std::string body =
        api_error_body({503, "too many connections; retry shortly", "", "server_error", "too_many_connections"});
    static const std::string msg = fmt::format(
        "HTTP/1.1 503 Service Unavailable\r\nServer: kestrel\r\nContent-Type: application/json\r\nRetry-After: "
        "1\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{}",
        body.size(), body);
    error_code ec;
    s.expires_after(std::chrono::seconds(2));
    co_await net::async_write(s, net::buffer(msg), net::redirect_error(kAwait, ec));
    if (!ec) co_await linger_close(s);
  }
}

}  // namespace kestrel

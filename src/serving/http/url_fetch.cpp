#include "serving/http/url_fetch.h"

#include <fmt/format.h>

#include <utility>  // (boost/asio/awaitable.hpp uses std::exchange without including it)

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/version.hpp>
#include <chrono>
#include <cstdint>
#include <exception>
#include <optional>

namespace kestrel {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

struct Url {
  bool tls = false;
  std::string host, port, target;
};

Url parse(const std::string& url) {
  Url u;
  std::string rest;
  if (url.rfind("http://", 0) == 0) {
    rest = url.substr(7);
  } else if (url.rfind("https://", 0) == 0) {
    u.tls = true;
    rest = url.substr(8);
  } else {
    throw UrlFetchError("not an http:// or https:// URL");
  }
  const size_t slash = rest.find_first_of("/?#");
  std::string authority = rest.substr(0, slash);
  u.target = slash == std::string::npos ? "/" : rest.substr(slash);
  if (!u.target.empty() && u.target[0] != '/') u.target = "/" + u.target;
  if (const size_t hash = u.target.find('#'); hash != std::string::npos) u.target.resize(hash);
  if (authority.find('@') != std::string::npos) throw UrlFetchError("URLs with credentials are not fetched");
  if (!authority.empty() && authority[0] == '[') {  // [IPv6]:port
    const size_t close = authority.find(']');
    if (close == std::string::npos) throw UrlFetchError("a malformed IPv6 host");
    u.host = authority.substr(1, close - 1);
    if (close + 1 < authority.size() && authority[close + 1] == ':') u.port = authority.substr(close + 2);
  } else if (const size_t colon = authority.rfind(':'); colon != std::string::npos) {
    u.host = authority.substr(0, colon);
    u.port = authority.substr(colon + 1);
  } else {
    u.host = authority;
  }
  if (u.host.empty()) throw UrlFetchError("no host");
  if (u.port.empty()) u.port = u.tls ? "443" : "80";
  return u;
}

// Milliseconds left before the deadline (a TimeoutError when none).
std::chrono::milliseconds left(Clock::time_point deadline, double timeout_s) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (ms.count() <= 0) throw UrlFetchError(fmt::format("no answer within {} s", timeout_s));
  return ms;
}

struct Response {
  unsigned status = 0;
  std::string location, body;
};

// One GET on a connected stream (plain or TLS); every step under the deadline (Beast's stream timeouts, which hold
// for asynchronous operations: the fetch runs as a coroutine on its own io_context).
template <class Stream, class Lowest>
net::awaitable<Response> exchange(Stream& stream, Lowest& lowest, const Url& u, const UrlFetchLimits& l,
                                  Clock::time_point deadline) {
  http::request<http::empty_body> req{http::verb::get, u.target, 11};
  req.set(http::field::host, u.host);
  req.set(http::field::user_agent, "kestrel");
  req.set(http::field::accept, "image/*");
  lowest.expires_after(left(deadline, l.timeout_s));
  co_await http::async_write(stream, req, net::use_awaitable);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(static_cast<std::uint64_t>(l.max_bytes));
  lowest.expires_after(left(deadline, l.timeout_s));
  beast::error_code ec;
  // The head first: a body announced over the limit is refused before any of it is read (Beast's body_limit
  // holds the rest, a chunked body included, as it arrives).
  const auto too_big = [&] { return UrlFetchError(fmt::format("more than {} bytes (the limit of one image)", l.max_bytes)); };
  co_await http::async_read_header(stream, buffer, parser, net::redirect_error(net::use_awaitable, ec));
  if (ec == http::error::body_limit) throw too_big();
  if (ec) throw beast::system_error(ec);
  if (const auto length = parser.content_length(); length && *length > l.max_bytes) throw too_big();
  if (!parser.is_done()) {
    lowest.expires_after(left(deadline, l.timeout_s));
    co_await http::async_read(stream, buffer, parser, net::redirect_error(net::use_awaitable, ec));
  }
  if (ec == http::error::body_limit) throw too_big();
  if (ec) throw beast::system_error(ec);
  if (parser.get().body().size() > l.max_bytes) throw too_big();
  Response r;
  r.status = parser.get().result_int();
  r.location = std::string(parser.get()[http::field::location]);
  r.body = std::move(parser.get().body());
  co_return r;
}

net::awaitable<Response> get_async(const Url& u, const UrlFetchLimits& l, Clock::time_point deadline) {
  auto ex = co_await net::this_coro::executor;
  tcp::resolver resolver(ex);
  beast::error_code ec;
  const auto endpoints = co_await resolver.async_resolve(u.host, u.port, net::redirect_error(net::use_awaitable, ec));
  if (ec) throw UrlFetchError(fmt::format("cannot resolve {}: {}", u.host, ec.message()));
  if (!u.tls) {
    beast::tcp_stream stream(ex);
    stream.expires_after(left(deadline, l.timeout_s));
    co_await stream.async_connect(endpoints, net::use_awaitable);
    Response r = co_await exchange(stream, stream, u, l, deadline);
    stream.socket().shutdown(tcp::socket::shutdown_both, ec);
    co_return r;
  }
  net::ssl::context ctx(net::ssl::context::tls_client);
  ctx.set_default_verify_paths();
  ctx.set_verify_mode(net::ssl::verify_peer);
  beast::ssl_stream<beast::tcp_stream> stream(ex, ctx);
  if (!SSL_set_tlsext_host_name(stream.native_handle(), u.host.c_str())) throw UrlFetchError("TLS: cannot set the server name");
  stream.set_verify_callback(net::ssl::host_name_verification(u.host));
  beast::get_lowest_layer(stream).expires_after(left(deadline, l.timeout_s));
  co_await beast::get_lowest_layer(stream).async_connect(endpoints, net::use_awaitable);
  beast::get_lowest_layer(stream).expires_after(left(deadline, l.timeout_s));
  co_await stream.async_handshake(net::ssl::stream_base::client, net::use_awaitable);
  Response r = co_await exchange(stream, beast::get_lowest_layer(stream), u, l, deadline);
  beast::get_lowest_layer(stream).close();  // (no TLS goodbye: servers often skip theirs)
  co_return r;
}

Response get(const Url& u, const UrlFetchLimits& l, Clock::time_point deadline) {
  net::io_context io;
  std::optional<Response> result;
  std::exception_ptr failure;
  net::co_spawn(io, get_async(u, l, deadline), [&](std::exception_ptr e, Response r) {
    if (e) failure = e;
    else result = std::move(r);
  });
  io.run();
  if (failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const UrlFetchError&) {
      throw;
    } catch (const beast::system_error& e) {
      if (e.code() == beast::error::timeout) throw UrlFetchError(fmt::format("no answer within {} s", l.timeout_s));
      throw UrlFetchError(e.code().message());
    } catch (const std::exception& e) {
      throw UrlFetchError(e.what());
    }
  }
  return std::move(*result);
}

}  // namespace

std::string fetch_url(const std::string& url, const UrlFetchLimits& limits) {
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limits.timeout_s));
  Url u = parse(url);
  for (int hop = 0;; hop++) {
    Response r = get(u, limits, deadline);
    if (r.status == 200) return std::move(r.body);
    const bool redirect = r.status == 301 || r.status == 302 || r.status == 303 || r.status == 307 || r.status == 308;
    if (!redirect) throw UrlFetchError(fmt::format("the server answered {}", r.status));
    if (hop >= limits.max_redirects) throw UrlFetchError(fmt::format("more than {} redirects", limits.max_redirects));
    if (r.location.empty()) throw UrlFetchError(fmt::format("a {} redirect without a Location", r.status));
    if (r.location[0] == '/') {
      u.target = r.location;  // (same scheme, host and port)
    } else {
      u = parse(r.location);
    }
  }
}

}  // namespace kestrel

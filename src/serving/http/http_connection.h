#pragma once
// One client connection as a coroutine on its own strand (Boost.Beast):
// requests read under deadlines and limits, framing checked, access checked,
// routed, answered — a deferred answer awaited and a streamed one written
// as it is produced, one write at a time (a client that does not read stops
// being polled; its request is cancelled when its channel overflows or a
// write times out). Internal to the transport (http_server.cpp).
#include <atomic>
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>

#include "serving/http/access_policy.h"
#include "serving/http/http_server.h"
#include "serving/engine/metrics.h"
#include "serving/http/router.h"

namespace kestrel {

struct ConnectionShared {
  const RouterSlot& router;
  const AccessPolicy& access;
  const HttpLimits& limits;
  ServerMetrics& metrics;
  std::atomic<int>& connections;  // open (the acceptor counts one in; the connection counts itself out)
  std::atomic<int>& busy;         // requests read and not yet answered
  std::atomic<bool>& stopping;    // no new request on a kept-alive connection
};

// Plain HTTP and HTTPS.
boost::asio::awaitable<void> serve_plain(boost::asio::ip::tcp::socket socket, ConnectionShared& shared);
boost::asio::awaitable<void> serve_tls(boost::asio::ip::tcp::socket socket, boost::asio::ssl::context& tls, ConnectionShared& shared);
// Beyond the connection cap: a 503 (plain HTTP only), then close.
boost::asio::awaitable<void> refuse_connection(boost::asio::ip::tcp::socket socket, bool tls);

}  // namespace kestrel

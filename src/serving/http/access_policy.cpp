#include "serving/http/access_policy.h"

#include <fmt/format.h>

#include <fstream>

#include "core/error.h"
#include "serving/api/anthropic_api.h"
#include "serving/api/openai_api.h"

namespace kestrel {
namespace {

// Equal without an early exit inside the key, so the time taken does not
// tell how much of a guess was right (the length is not the secret).
bool same_secret(std::string_view a, std::string_view b) {
  if (a.size() != b.size() || b.empty()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); i++) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// "name:port" -> "name"; "[::1]:8080" -> "[::1]".
std::string_view host_name(std::string_view host) {
  if (!host.empty() && host[0] == '[') return host.substr(0, host.find(']') + 1);
  return host.substr(0, host.find(':'));
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

}  // namespace

bool AccessPolicy::host_allowed(std::string_view host) const {
  if (c_.allowed_hosts.empty()) return true;
  for (const auto& h : c_.allowed_hosts)
    if (iequals_ascii(h, host) || iequals_ascii(h, host_name(host))) return true;
  return false;
}

bool AccessPolicy::origin_allowed(std::string_view origin) const {
  for (const auto& o : c_.cors_origins)
    if (o == "*" || o == origin) return true;
  return false;
}

bool AccessPolicy::key_valid(std::string_view authorization, std::string_view x_api_key) const {
  constexpr std::string_view scheme = "Bearer ";
  std::string_view key;
  if (authorization.size() > scheme.size() && iequals_ascii(authorization.substr(0, scheme.size()), scheme))
    key = trim(authorization.substr(scheme.size()));
  else if (!x_api_key.empty())  // Anthropic's clients send the key as x-api-key
    key = trim(x_api_key);
  else
    return false;
  bool ok = false;
  for (const auto& k : c_.api_keys) ok |= same_secret(key, k);  // no early exit either
  return ok;
}

std::optional<HttpResponse> AccessPolicy::check(const HttpRequest& req) const {
  if (!host_allowed(req.header("host")))
    return error_response({403, fmt::format("Host '{}' is not served here (see --allowed-host)",
                                            req.header("host").substr(0, 128)),
                           "", "invalid_request_error", "host_not_allowed"});
  const std::string_view origin = req.header("origin");
  if (req.method == "OPTIONS" && !origin.empty() && !req.header("access-control-request-method").empty()) {
    if (!origin_allowed(origin))
      return error_response({403, fmt::format("origin '{}' is not allowed (see --cors-origin)", origin.substr(0, 128)),
                             "", "invalid_request_error", "origin_not_allowed"});
    HttpResponse r;
    r.status = 204;
    r.content_type.clear();
    r.headers.emplace_back("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    const std::string_view asked = req.header("access-control-request-headers");
    r.headers.emplace_back("Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type, x-api-key" : asked);
    r.headers.emplace_back("Access-Control-Max-Age", "600");
    decorate(req, r);
    return r;
  }
  // The chat page itself is open: it asks for the key before it calls the API.
  const bool open = req.path == "/health" || req.path == "/ready" || (req.path == "/" && req.method == "GET") ||
                    (req.path == "/metrics" && !c_.protect_metrics);
  if (!c_.api_keys.empty() && !open && !key_valid(req.header("authorization"), req.header("x-api-key"))) {
    const ApiError e{401,
                     req.header("authorization").empty() && req.header("x-api-key").empty()
                         ? "an API key is required: send 'Authorization: Bearer <key>' (or 'x-api-key: <key>')"
                         : "the API key is not valid",
                     "", "invalid_request_error", "invalid_api_key"};
    HttpResponse r = req.path.rfind("/v1/messages", 0) == 0 ? anthropic_error_response(e) : error_response(e);
    r.headers.emplace_back("WWW-Authenticate", "Bearer");
    decorate(req, r);
    return r;
  }
  return std::nullopt;
}

void AccessPolicy::decorate(const HttpRequest& req, HttpResponse& res) const {
  const std::string_view origin = req.header("origin");
  if (origin.empty() || !origin_allowed(origin)) return;
  res.headers.emplace_back("Access-Control-Allow-Origin", std::string(origin));
  res.headers.emplace_back("Vary", "Origin");
}

std::vector<std::string> read_api_key_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw Error(fmt::format("cannot read the API key file '{}'", path));
  std::vector<std::string> keys;
  std::string line;
  while (std::getline(f, line)) {
    const std::string_view k = trim(line);
    if (!k.empty() && k[0] != '#') keys.emplace_back(k);
  }
  if (keys.empty()) throw Error(fmt::format("the API key file '{}' holds no key", path));
  return keys;
}

}  // namespace kestrel

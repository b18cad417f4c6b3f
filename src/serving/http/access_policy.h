#pragma once
// Who may call the server, apart from the transport: API keys (Bearer, as
// OpenAI's clients send them, or x-api-key, as Anthropic's do), a Host allow-list (against DNS rebinding),
// and CORS for browsers (preflights answered, allowed origins echoed).
// /health and the chat page (GET /) are always open (load balancers probe the
// first without keys; the page asks for the key itself); /metrics
// is open unless protect_metrics.
#include <optional>
#include <string>
#include <vector>

#include "serving/http/http_types.h"

namespace kestrel {

struct AccessConfig {
  std::vector<std::string> api_keys;       // accepted Bearer tokens; empty: no key needed
  bool protect_metrics = false;            // /metrics needs a key too
  std::vector<std::string> cors_origins;   // origins allowed from a browser ("*": any); empty: no CORS
  std::vector<std::string> allowed_hosts;  // Host values served ("name" or "name:port"); empty: any
};

class AccessPolicy {
 public:
  explicit AccessPolicy(AccessConfig config) : c_(std::move(config)) {}

  // A response that ends the request here (403 for a Host not served, 204
  // or 403 for a CORS preflight, 401 without a valid key), or nothing.
  std::optional<HttpResponse> check(const HttpRequest& req) const;
  // What every answer to this request carries (CORS headers).
  void decorate(const HttpRequest& req, HttpResponse& res) const;

 private:
  bool host_allowed(std::string_view host) const;
  bool origin_allowed(std::string_view origin) const;
  bool key_valid(std::string_view authorization, std::string_view x_api_key) const;

  AccessConfig c_;
};

// Reads API keys from a file: one per line; blank lines and lines starting
// with '#' are skipped. Throws Error naming the file if it cannot be read or
// holds no key.
std::vector<std::string> read_api_key_file(const std::string& path);

}  // namespace kestrel

#pragma once
// One streamed request against an OpenAI-compatible server, timed on the
// client: when it was sent, when each content chunk arrived, when it ended,
// and what went wrong if it did (an HTTP error, a dropped connection, a
// stall past the timeout, a malformed stream) — never a hang.
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "loadtest/load_stats.h"

namespace httplib {
class Client;
}

namespace kestrel {

struct Endpoint {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string base_path;  // e.g. "" or "/v1" prefix already stripped
  std::string api_key;    // sent as a Bearer token when set
};

// "http://host:port[/prefix]" -> Endpoint; throws Error for anything else (https is not supported).
Endpoint parse_url(const std::string& url);

class LoadClient {
 public:
  LoadClient(const Endpoint& ep, double timeout_s);
  ~LoadClient();

  // POSTs body (with "stream": true) to path and times the stream.
  // start: the test's clock origin.
  RequestRecord stream(const std::string& path, const nlohmann::json& body,
                       std::chrono::steady_clock::time_point start);
  // The server's /tokenize (llama.cpp's or Kestrel's; vLLM's "prompt" form
  // as fallback): token count of text, or nothing if the server has none.
  std::optional<int64_t> count_tokens(const std::string& text);
  // The server's token ids for text (add_special: with BOS where the model adds it).
  std::optional<std::vector<int64_t>> tokenize(const std::string& text, bool add_special);

 private:
  Endpoint ep_;
  double timeout_s_;
  std::unique_ptr<httplib::Client> http_;
  // http_'s connection has carried a whole exchange: kept alive since, the server may have closed it as idle.
  bool reused_ = false;
};

}  // namespace kestrel

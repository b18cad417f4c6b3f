#pragma once
// Fetching one http(s) URL's body for `serve --allow-media-urls` (images named by URL in a request: OpenAI
// image_url, Responses input_image, Anthropic's url image source), on Boost.Beast's client: http and https (TLS
// with the system's certificate authorities, the peer and its host name verified), at most `max_bytes` of body
// (refused beyond, while it arrives), one deadline for the whole fetch (connect, TLS, request, every redirect), a
// few redirects (301, 302, 303, 307, 308) followed. Off by default: a server fetching what its clients name can
// be pointed at the operator's own network, so the flag is the operator's decision (docs/multimodal.md).
#include <cstddef>
#include <stdexcept>
#include <string>

namespace kestrel {

struct UrlFetchLimits {
  size_t max_bytes = 20u << 20;
  double timeout_s = 10.0;
  int max_redirects = 3;
};

// Thrown with a message that names what went wrong (no status 200, too big, too slow, a TLS failure, ...).
struct UrlFetchError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The body of GET url; the error says why not.
std::string fetch_url(const std::string& url, const UrlFetchLimits& limits);

}  // namespace kestrel

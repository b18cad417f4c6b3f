#pragma once
// Strict HTTP/1.1 request framing (RFC 9112), checked on a parsed head
// before its body is read. The parser (Boost.Beast) already refuses
// malformed lines, conflicting Content-Lengths and Transfer-Encoding with
// Content-Length; this refuses what it tolerates but a proxy in front of us
// might read differently (request smuggling): a repeated Content-Length or
// Transfer-Encoding, a length with a sign, a transfer coding other than
// chunked, control bytes in a value, a missing or repeated Host.
#include <optional>
#include <string>
#include <string_view>

#include "serving/http/http_types.h"

namespace kestrel {

struct RequestHead {
  int version = 11;  // 10 or 11 (HTTP/1.0, HTTP/1.1)
  std::string_view target;
  const Headers* fields = nullptr;
};

struct FramingProblem {
  int status = 400;  // 400, 417, 431, 501 or 505
  std::string message;
};

// Nothing when the head may be served.
std::optional<FramingProblem> framing_problem(const RequestHead& head, int max_header_fields);

// The path of a request target: origin-form "/a/b?x" gives "/a/b",
// absolute-form "http://h:1/a?x" gives "/a"; "*" stays "*".
std::string target_path(std::string_view target);
// ...and its query string (after '?', before any '#'; empty: none).
std::string target_query(std::string_view target);

}  // namespace kestrel

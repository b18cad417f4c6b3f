#include "serving/http/http_framing.h"

#include <fmt/format.h>

#include <algorithm>

namespace kestrel {
namespace {

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Field values are visible characters, spaces and tabs (RFC 9110 5.5); a
// NUL, CR, LF or other control byte is refused rather than stripped.
bool clean_value(std::string_view v) {
  return std::none_of(v.begin(), v.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return (u < 0x20 && u != '\t') || u == 0x7f;
  });
}

FramingProblem bad(std::string message) { return {400, std::move(message)}; }

}  // namespace

std::optional<FramingProblem> framing_problem(const RequestHead& head, int max_header_fields) {
  if (head.version != 10 && head.version != 11)
    return FramingProblem{505, fmt::format("HTTP/{}.{} is not supported (HTTP/1.1 is)", head.version / 10,
                                           head.version % 10)};
  const Headers& fields = *head.fields;
  if (static_cast<int>(fields.size()) > max_header_fields)
    return FramingProblem{431, fmt::format("{} header fields; at most {} are accepted", fields.size(), max_header_fields)};
  if (head.target.empty() || !(head.target[0] == '/' || head.target == "*" || head.target.rfind("http://", 0) == 0 ||
                               head.target.rfind("https://", 0) == 0))
    return bad(fmt::format("request target '{}' is not a path", head.target.substr(0, 64)));
  int hosts = 0, lengths = 0, codings = 0;
  for (const auto& [name, value] : fields) {
    if (!clean_value(value)) return bad(fmt::format("header '{}' holds a control character", name));
    if (iequals_ascii(name, "host")) {
      hosts++;
    } else if (iequals_ascii(name, "content-length")) {
      if (++lengths > 1) return bad("more than one Content-Length");
      if (!all_digits(value) || value.size() > 18)
        return bad(fmt::format("Content-Length '{}' is not a decimal number", value.substr(0, 32)));
    } else if (iequals_ascii(name, "transfer-encoding")) {
      if (++codings > 1) return bad("more than one Transfer-Encoding");
      if (head.version == 10) return bad("Transfer-Encoding in an HTTP/1.0 request");
      if (!iequals_ascii(value, "chunked"))
        return FramingProblem{501, fmt::format("Transfer-Encoding '{}' is not supported (only chunked)",
                                               value.substr(0, 32))};
    }
  }
  if (lengths && codings) return bad("both Content-Length and Transfer-Encoding");
  if (head.version == 11 && hosts != 1)
    return bad(hosts == 0 ? "an HTTP/1.1 request without Host" : "more than one Host");
  if (hosts > 1) return bad("more than one Host");
  return std::nullopt;
}

std::string target_path(std::string_view target) {
  if (target.rfind("http://", 0) == 0 || target.rfind("https://", 0) == 0) {
    const size_t authority = target.find("//") + 2;
    const size_t slash = target.find('/', authority);
    target = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
  }
  const size_t q = target.find_first_of("?#");
  return std::string(target.substr(0, q));
}

std::string target_query(std::string_view target) {
  const size_t q = target.find('?');
  if (q == std::string_view::npos) return "";
  const std::string_view rest = target.substr(q + 1);
  return std::string(rest.substr(0, rest.find('#')));
}

}  // namespace kestrel

#include "serving/http/http_types.h"

#include <algorithm>
#include <cctype>

namespace kestrel {

bool iequals_ascii(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view HttpRequest::header(std::string_view name) const {
  for (const auto& [n, v] : headers)
    if (iequals_ascii(n, name)) return v;
  return {};
}

std::string HttpRequest::query_param(std::string_view name) const {
  auto decode = [](std::string_view s) {
    std::string out;
    for (size_t i = 0; i < s.size(); i++) {
      if (s[i] == '+') {
        out += ' ';
      } else if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
                 std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
        out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
        i += 2;
      } else {
        out += s[i];
      }
    }
    return out;
  };
  std::string_view q = query;
  while (!q.empty()) {
    const size_t amp = q.find('&');
    const std::string_view pair = q.substr(0, amp);
    const size_t eq = pair.find('=');
    if (decode(pair.substr(0, eq)) == name) return eq == std::string_view::npos ? "" : decode(pair.substr(eq + 1));
    q = amp == std::string_view::npos ? std::string_view() : q.substr(amp + 1);
  }
  return "";
}

}  // namespace kestrel

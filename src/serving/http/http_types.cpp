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

}  // namespace kestrel

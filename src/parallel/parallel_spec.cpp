#include "parallel/parallel_spec.h"

#include <fmt/format.h>

#include <charconv>
#include <string_view>

#include "core/error.h"

namespace kestrel {

std::string ParallelSpec::describe() const {
  std::string s = fmt::format("tp={}", tp);
  if (ep > 1) s += fmt::format(",ep={}", ep);
  if (pp > 1) s += fmt::format(",pp={}", pp);
  return s;
}

ParallelSpec parse_parallel_spec(const std::string& text) {
  ParallelSpec spec;
  bool seen[3] = {false, false, false};
  std::string_view rest = text;
  if (rest.empty()) throw Error("--parallel: empty (expected e.g. tp=2)");
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    if (comma != std::string_view::npos && rest.empty()) throw Error(fmt::format("--parallel '{}': trailing comma", text));
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos)
      throw Error(fmt::format("--parallel '{}': '{}' is not KIND=N (kinds: tp, ep, pp)", text, item));
    const std::string_view kind = item.substr(0, eq), value = item.substr(eq + 1);
    int n = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    if (ec != std::errc{} || end != value.data() + value.size() || n < 1 || n > 4096)
      throw Error(fmt::format("--parallel '{}': '{}' must be a whole number from 1 to 4096", text, value));
    const int which = kind == "tp" ? 0 : kind == "ep" ? 1 : kind == "pp" ? 2 : -1;
    if (which < 0) throw Error(fmt::format("--parallel '{}': unknown kind '{}' (kinds: tp, ep, pp)", text, kind));
    if (seen[which]) throw Error(fmt::format("--parallel '{}': '{}' given twice", text, kind));
    seen[which] = true;
    (which == 0 ? spec.tp : which == 1 ? spec.ep : spec.pp) = n;
  }
  return spec;
}

}  // namespace kestrel

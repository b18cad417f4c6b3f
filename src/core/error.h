#pragma once
// One exception type for every user-facing failure: the message must name the
// thing that is wrong (file, tensor, parameter) so the CLI can print it as is.
#include <stdexcept>
#include <string>

namespace kestrel {

struct Error : std::runtime_error {
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace kestrel

#pragma once
// A whole file as bytes, or an Error naming what it was meant to be.
#include <fmt/format.h>

#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"

namespace kestrel {

// what: how the file is named in the error ("chat template file", "--vars file").
inline std::string read_whole_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  if (!in || !(ss << in.rdbuf())) throw Error(fmt::format("{} '{}' cannot be read", what, path));
  return ss.str();
}

}  // namespace kestrel

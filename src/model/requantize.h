#pragma once
// A GGUF file rewritten with its matrices in another type (round to nearest,
// per block): metadata copied (general.file_type updated), 1-D tensors kept
// F32, rows that do not divide into the type's blocks kept in a wider type
// (and reported), every tensor produced when written, never all at once.
#include <functional>
#include <string>

#include "core/ggml_types.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"

namespace kestrel {

struct RequantizeOptions {
  GgmlType type = GgmlType::Q8_0;
  int n_threads = 1;
  // Called for each tensor stored in another type than asked (name, type used).
  std::function<void(const std::string&, GgmlType)> on_fallback;
};

// Throws Error when a tensor's type cannot be read or the target cannot be written.
GgufWriter requantize(const GgufFile& in, const RequantizeOptions& options);

}  // namespace kestrel

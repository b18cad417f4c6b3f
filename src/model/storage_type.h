#pragma once
// Which type a tensor is stored in when a whole model is asked for one type:
// 1-D tensors (norms, biases) stay F32, and rows that do not divide into the
// format's blocks fall back to F16 (llama.cpp refuses such files instead).
#include <cstdint>
#include <vector>

#include "core/ggml_types.h"

namespace kestrel {

inline GgmlType storage_type_for(GgmlType wanted, const std::vector<int64_t>& ne) {
  if (ne.size() == 1) return GgmlType::F32;
  if (ne[0] % traits(wanted).block_size != 0) return GgmlType::F16;
  return wanted;
}

}  // namespace kestrel

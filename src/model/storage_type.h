#pragma once
// Which type a tensor is stored in when a whole model is asked for one type:
// 1-D tensors (norms, biases) stay F32, and rows that do not divide into the
// format's blocks fall back: a k-quant (256-wide blocks) to Q8_0 when the row
// divides into 32s (as llama.cpp falls back to a 32-wide type), anything else
// to F16.
#include <cstdint>
#include <string>
#include <vector>

#include "core/ggml_types.h"

namespace kestrel {

// MoE routers (ffn_gate_inp) stay in float, as llama-quantize keeps them:
// a rounded router changes which experts run, not just how precisely.
inline bool is_moe_router(const std::string& name) { return name.find("ffn_gate_inp.weight") != std::string::npos; }

inline GgmlType storage_type_for(GgmlType wanted, const std::vector<int64_t>& ne) {
  if (ne.size() == 1) return GgmlType::F32;
  if (ne[0] % traits(wanted).block_size != 0) return ne[0] % 32 == 0 && traits(wanted).block_size == 256 ? GgmlType::Q8_0 : GgmlType::F16;
  return wanted;
}

}  // namespace kestrel

#pragma once
// Which type a tensor is stored in when a whole model is asked for one type:
// 1-D tensors (norms, biases) stay F32, and rows that do not divide into the
// format's blocks fall back as llama-quantize falls back (a 32-wide stand-in
// of about the same precision: Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0,
// Q2_K/Q3_K -> Q4_0, IQ4_XS -> IQ4_NL), else to F16.
#include <cstdint>
#include <string>
#include <vector>

#include "formats/block_formats.h"
#include "formats/ggml_types.h"

namespace kestrel {

// MoE routers (ffn_gate_inp) stay in float, as llama-quantize keeps them:
// a rounded router changes which experts run, not just how precisely.
inline bool is_moe_router(const std::string& name) { return name.find("ffn_gate_inp.weight") != std::string::npos; }

// llama-quantize's rule (tensor_requires_imatrix): a tensor rounded to one of
// the lowest-bit lattice types needs importance data — the embeddings and the
// output head excepted, which it rounds without.
inline bool needs_importance_matrix(const std::string& name, GgmlType type) {
  if (name == "token_embd.weight" || name == "per_layer_token_embd.weight" || name == "output.weight") return false;
  return requires_importance(type);
}

// llama-quantize's stand-in for type t in rows of `cols` elements (t itself when they divide).
inline GgmlType fallback_type(GgmlType t, int64_t cols) {
  if (cols % traits(t).block_size == 0) return t;
  GgmlType r;
  switch (t) {
    case GgmlType::IQ1_S: case GgmlType::IQ1_M: case GgmlType::IQ2_XXS: case GgmlType::IQ2_XS: case GgmlType::IQ2_S:
    case GgmlType::IQ3_XXS: case GgmlType::IQ3_S: case GgmlType::IQ4_XS: r = GgmlType::IQ4_NL; break;
    case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::TQ1_0: case GgmlType::TQ2_0: r = GgmlType::Q4_0; break;
    case GgmlType::Q4_K: r = GgmlType::Q5_0; break;
    case GgmlType::Q5_K: r = GgmlType::Q5_1; break;
    case GgmlType::Q6_K: r = GgmlType::Q8_0; break;
    default: r = GgmlType::F16; break;
  }
  return cols % traits(r).block_size == 0 ? r : GgmlType::F16;
}

inline GgmlType storage_type_for(GgmlType wanted, const std::vector<int64_t>& ne) {
  if (ne.size() == 1) return GgmlType::F32;
  return fallback_type(wanted, ne[0]);
}

}  // namespace kestrel

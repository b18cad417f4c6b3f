#pragma once
// llama-quantize's named mixes ("Q4_K_M", "Q3_K_S", "IQ4_XS", ...): one base
// type plus per-tensor rules that raise the tensors quantization hurts most
// (attn_v, ffn_down in the first and last layers, the output head) and fall
// back to a 32-wide type for rows that are not a multiple of 256. The rules
// follow llama.cpp's llama_tensor_get_type, in its tensor order (layer by
// layer, then by name), so that a model quantized here holds the same type
// in every tensor as llama-quantize's file of the same mix.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/ggml_types.h"
#include "gguf/gguf.h"

namespace kestrel {

struct QuantMix {
  const char* name;    // as llama-quantize spells it, e.g. "Q4_K_M"
  uint32_t ftype;      // llama_ftype, written as general.file_type
  GgmlType base;       // the type of every tensor no rule raises
  const char* about;   // for help texts
  bool needs_imatrix = false;  // llama-quantize refuses it without an importance matrix
};

// The mixes Kestrel writes (llama-quantize's list, IQ1-IQ3 included).
const std::vector<QuantMix>& quant_mixes();
std::optional<QuantMix> find_quant_mix(std::string_view name);  // case-insensitive
std::string quant_mix_names();                                  // "Q4_0, Q4_1, ..."

struct QuantMixOptions {
  bool has_imatrix = false;  // some rules differ when an importance matrix is given
  std::optional<GgmlType> output_type, token_embedding_type;  // llama-quantize's overrides
};

// The type of every tensor of `in` under the mix (tensors no rule quantizes
// keep their type). Throws naming the tensor when a rule asks for a type
// Kestrel cannot write.
std::map<std::string, GgmlType> plan_quant_mix(const GgufFile& in, const QuantMix& mix, const QuantMixOptions& options);

}  // namespace kestrel

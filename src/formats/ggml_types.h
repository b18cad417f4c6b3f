#pragma once
// GGUF tensor types: the numeric ids are GGUF's (ggml_type), so files interchange.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kestrel {

enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39,
  // Ours, not GGUF's (GGUF has no FP8 type): blocks of 32 FP8 E4M3 values with
  // one fp16 scale. Other GGUF readers reject a file holding it, by design.
  KESTREL_FP8_E4M3 = 1000,
};

struct GgmlTypeTraits {
  const char* name;
  int64_t block_size;   // elements per block (1 for plain types)
  size_t type_size;     // bytes per block
  bool computable;      // Kestrel can dequantize / multiply with it
};

// Traits of a known type id, or nullopt for an id GGUF does not define.
std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t type_id);
const GgmlTypeTraits& traits(GgmlType t);
std::string_view type_name(GgmlType t);
std::optional<GgmlType> type_from_name(std::string_view name);  // "q4_0", "F16", ...

// llama.cpp's general.file_type (llama_ftype) for a model stored mostly in t.
uint32_t llama_file_type(GgmlType t);

// Bytes of n elements of type t; n must be a multiple of the block size.
size_t row_bytes(GgmlType t, int64_t n);

}  // namespace kestrel

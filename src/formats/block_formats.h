#pragma once
// GGUF block layouts (bit-compatible with ggml) and their scalar reference
// quantize/dequantize routines. Every SIMD kernel is tested against these.
#include <cstddef>
#include <cstdint>

#include "formats/ggml_types.h"

namespace kestrel {

constexpr int kQK8_0 = 32;
constexpr int kQK4_0 = 32;

// Q8_0: 32 signed bytes sharing one fp16 scale: x = d * q.
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK8_0];
};
static_assert(sizeof(BlockQ8_0) == 34);

// Q4_0: 32 nibbles sharing one fp16 scale: x = d * (q - 8). Byte j holds
// element j in its low nibble and element j+16 in its high nibble.
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK4_0 / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

// FP8 E4M3 with one fp16 scale per 32 values: x = d * e4m3(q), d = max|x| / 448
// (Kestrel's own GGUF type, GgmlType::KESTREL_FP8_E4M3).
constexpr int kQKFp8 = 32;
struct BlockFp8 {
  uint16_t d;
  uint8_t qs[kQKFp8];
};
static_assert(sizeof(BlockFp8) == 34);
void quantize_row_fp8(const float* x, BlockFp8* y, int64_t n);
void dequantize_row_fp8(const BlockFp8* x, float* y, int64_t n);

// Weight files round half away from zero (ggml's reference quantizer);
// activations at run time round half to even (ggml's SIMD quantizer).
enum class Rounding { HalfAwayFromZero, HalfToEven };
void quantize_row_q8_0_ref(const float* x, BlockQ8_0* y, int64_t n, Rounding r = Rounding::HalfAwayFromZero);
void quantize_row_q4_0_ref(const float* x, BlockQ4_0* y, int64_t n);
void dequantize_row_q8_0(const BlockQ8_0* x, float* y, int64_t n);
void dequantize_row_q4_0(const BlockQ4_0* x, float* y, int64_t n);

// Any computable type to float32 (n elements, n a multiple of the block size).
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);
// Float32 to any type can_quantize_to accepts (n a multiple of the block
// size). `importance` (n values, optional): how much each column matters
// (an importance matrix's row, imatrix.h): the fits weigh errors by it.
void quantize_row(GgmlType type, const float* src, void* dst, int64_t n, const float* importance = nullptr);
// Whether quantize_row's fit for this type uses an importance row.
bool uses_importance(GgmlType type);
// Whether llama-quantize writes this type only with an importance matrix
// (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS): without one it refuses.
bool requires_importance(GgmlType type);
// Whether quantize_row supports writing this type.
bool can_quantize_to(GgmlType type);
// The names of those types, for help texts and error messages.
inline constexpr const char* kWritableTypes =
    "f32, f16, bf16, q8_0, q5_0, q5_1, q4_0, q4_1, q6_k, q5_k, q4_k, q3_k, q2_k, iq4_nl, iq4_xs, iq3_s, iq3_xxs, "
    "iq2_s, iq2_xs, iq2_xxs, iq1_m, iq1_s, mxfp4, fp8";

}  // namespace kestrel

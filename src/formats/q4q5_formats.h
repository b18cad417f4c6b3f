#pragma once
// ggml's other 32-wide "legacy" blocks, bit-compatible with GGUF: Q4_1 and
// Q5_1 (scale and minimum), Q5_0 (scale, a fifth bit per weight), and Q8_1,
// the activation format ggml pairs with Q4_1/Q5_1 (Q8_0 plus the scaled sum
// of its values, which carries the weights' minimum into the dot product).
// Layouts as ggml-common.h defines them; element j (< 16) is the low nibble
// of qs[j], element j + 16 its high nibble; Q5's fifth bit of element j is
// bit j of the 32-bit qh.
#include <cstdint>
#include <cstring>

namespace kestrel {

constexpr int kQK32 = 32;

struct BlockQ4_1 {
  uint16_t d, m;  // x = d * q + m, q 0..15
  uint8_t qs[kQK32 / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

struct BlockQ5_0 {
  uint16_t d;  // x = d * (q - 16), q 0..31
  uint8_t qh[4];
  uint8_t qs[kQK32 / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

struct BlockQ5_1 {
  uint16_t d, m;  // x = d * q + m, q 0..31
  uint8_t qh[4];
  uint8_t qs[kQK32 / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

struct BlockQ8_1 {
  uint16_t d, s;  // x = d * q; s = d * sum(q)
  int8_t qs[kQK32];
};
static_assert(sizeof(BlockQ8_1) == 36);

// The 5-bit level of element j of a Q5_0/Q5_1 block.
inline int q5_level(const uint8_t* qs, const uint8_t* qh4, int j) {
  uint32_t qh;
  std::memcpy(&qh, qh4, 4);
  const int nibble = j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4;
  return nibble | static_cast<int>(((qh >> j) & 1) << 4);
}

// Weight writers (ggml's reference quantizers: min/max fits, rounding half
// away from zero); with an importance row (imatrix.h), weighted least-squares fits.
void quantize_row_q4_1(const float* x, BlockQ4_1* y, int64_t n, const float* importance = nullptr);
void quantize_row_q5_0(const float* x, BlockQ5_0* y, int64_t n, const float* importance = nullptr);
void quantize_row_q5_1(const float* x, BlockQ5_1* y, int64_t n, const float* importance = nullptr);
// Activations as ggml's run-time path makes them: d = max|x| / 127, values
// x * 127 / max|x| rounded half to even, s = fp16(d * sum).
void quantize_row_q8_1(const float* x, BlockQ8_1* y, int64_t n);

void dequantize_row_q4_1(const BlockQ4_1* x, float* y, int64_t n);
void dequantize_row_q5_0(const BlockQ5_0* x, float* y, int64_t n);
void dequantize_row_q5_1(const BlockQ5_1* x, float* y, int64_t n);

}  // namespace kestrel

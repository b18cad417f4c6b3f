#pragma once
// 4-bit formats whose levels are a fixed table rather than a linear range,
// bit-compatible with GGUF (ggml-common.h):
// - IQ4_NL: 32 weights, one fp16 scale: x = d * kIq4nlValues[q];
// - IQ4_XS: 256 weights as 8 blocks of 32 with 6-bit scales (ls - 32) under
//   one fp16 scale: x = d * (ls - 32) * kIq4nlValues[q];
// - MXFP4 (OCP microscaling): 32 FP4 E2M1 weights, one E8M0 exponent:
//   x = 2^(e - 127) * e2m1(q); ggml stores e2m1 doubled (kMxfp4Values) and
//   halves the exponent's value to match.
// Nibbles as in Q4_0: element j (< 16) in the low nibble of qs[j], j + 16 in its high nibble.
#include <cstdint>
#include <cstring>

namespace kestrel {

inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[16];
};
static_assert(sizeof(BlockIQ4_NL) == 18);

struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;     // bits 2j, 2j+1: high two bits of block j's scale
  uint8_t scales_l[4];   // low four bits: block 2k in the low nibble of byte k, 2k + 1 in the high
  uint8_t qs[128];
};
static_assert(sizeof(BlockIQ4_XS) == 136);

struct BlockMXFP4 {
  uint8_t e;  // E8M0
  uint8_t qs[16];
};
static_assert(sizeof(BlockMXFP4) == 17);

// The 6-bit scale of IQ4_XS block j (0..7), still biased by 32.
inline int iq4xs_scale(const BlockIQ4_XS& b, int j) {
  return ((b.scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((b.scales_h >> (2 * j)) & 3) << 4);
}

// 2^(e - 128): half of E8M0's value, as ggml scales its doubled E2M1 table.
// Built from the bits (no libm call: the dot kernels take one per block).
inline float e8m0_to_fp32_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// `importance`: an importance matrix's row (imatrix.h), optional.
void quantize_row_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t n, const float* importance = nullptr);
void quantize_row_iq4_xs(const float* x, BlockIQ4_XS* y, int64_t n, const float* importance = nullptr);
void quantize_row_mxfp4(const float* x, BlockMXFP4* y, int64_t n);
void dequantize_row_iq4_nl(const BlockIQ4_NL* x, float* y, int64_t n);
void dequantize_row_iq4_xs(const BlockIQ4_XS* x, float* y, int64_t n);
void dequantize_row_mxfp4(const BlockMXFP4* x, float* y, int64_t n);

}  // namespace kestrel

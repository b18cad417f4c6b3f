#pragma once
// ggml's k-quant super-blocks (256 weights each), bit-compatible with GGUF,
// and their scalar dequantization: the reference every k-quant kernel is
// tested against. Layouts as ggml-common.h defines them.
#include <cstdint>

namespace kestrel {

constexpr int kQK_K = 256;
constexpr int kKScaleBytes = 12;

// Q4_K: 8 sub-blocks of 32 with 6-bit scales and mins (packed in 12 bytes),
// scaled by d and dmin: x = d * sc * q - dmin * m, q 4 bits.
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ4_K) == 144);

// Q5_K: as Q4_K with a fifth bit per weight in qh.
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ5_K) == 176);

// Q6_K: 16 sub-blocks of 16 with int8 scales: x = d * sc * (q - 32), q 6 bits
// (low 4 in ql, high 2 in qh).
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

// Q2_K: 16 sub-blocks of 16, each with a 4-bit scale (low nibble of
// scales[j]) and 4-bit min (high nibble): x = d * sc * q - dmin * m, q 2 bits.
// Element 128h + 32j + l (l < 32) is (qs[32h + l] >> 2j) & 3, sub-block 8h + 2j + l / 16.
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d, dmin;
};
static_assert(sizeof(BlockQ2_K) == 84);

// Q3_K: 16 sub-blocks of 16 with 6-bit signed scales (stored + 32, packed in
// 12 bytes): x = d * (sc - 32) * (q - 4), q 3 bits: the low two as in Q2_K,
// the third bit of element e in hmask[e % 32] >> (e / 32).
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[kKScaleBytes];
  uint16_t d;
};
static_assert(sizeof(BlockQ3_K) == 110);

// The 16 biased 6-bit Q3_K scales (0..63; the scale is the value - 32): low
// four bits in the nibbles of bytes 0-7 (scales 0-7 low, 8-15 high), high two
// bits in bytes 8-11 (scale j at byte 8 + j % 4, bits 2 (j / 4)).
inline void unpack_scales_q3_K(const uint8_t* q, int8_t* out) {
  for (int j = 0; j < 16; j++) {
    const int low = j < 8 ? q[j] & 0xF : q[j - 8] >> 4;
    out[j] = static_cast<int8_t>(low | (((q[8 + j % 4] >> (2 * (j / 4))) & 3) << 4));
  }
}

// Scale and min of Q4_K/Q5_K sub-block j (0..7) from the 12 packed bytes:
// the first four in 6 bits of bytes 0-3 / 4-7, the last four split over
// bytes 8-11 (low 4 bits) and the top 2 bits of bytes 0-7. The one reader of
// that packing: decoders, row dots and GPTQ's grid all call it.
inline void unpack_scale_min_k4(const uint8_t* q, int j, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Writers (kquant_quantize.cpp): n a multiple of 256; `importance` (n
// values, optional): an importance matrix's row for these columns (imatrix.h).
void quantize_row_q4_K(const float* x, BlockQ4_K* y, int64_t n, const float* importance = nullptr);
void quantize_row_q5_K(const float* x, BlockQ5_K* y, int64_t n, const float* importance = nullptr);
void quantize_row_q6_K(const float* x, BlockQ6_K* y, int64_t n, const float* importance = nullptr);
void quantize_row_q2_K(const float* x, BlockQ2_K* y, int64_t n, const float* importance = nullptr);
void quantize_row_q3_K(const float* x, BlockQ3_K* y, int64_t n, const float* importance = nullptr);

void dequantize_row_q4_K(const BlockQ4_K* x, float* y, int64_t n);
void dequantize_row_q5_K(const BlockQ5_K* x, float* y, int64_t n);
void dequantize_row_q6_K(const BlockQ6_K* x, float* y, int64_t n);
void dequantize_row_q2_K(const BlockQ2_K* x, float* y, int64_t n);
void dequantize_row_q3_K(const BlockQ3_K* x, float* y, int64_t n);

}  // namespace kestrel

#pragma once
// The IQ1-IQ3 weight formats ("i-quants"), bit-compatible with GGUF
// (ggml-common.h). Each stores 256 weights as groups of 8 (or 4) whose
// magnitudes are one entry of a fixed lattice (iq_grids.h), with signs,
// grid indices and small odd scales (2s + 1) packed around one fp16 scale:
//   IQ2_XXS (2.06 bpw): per 32, four 8-bit grid indices, four 7-bit signs, a 4-bit scale;
//   IQ2_XS  (2.31 bpw): per 8, a 9-bit index and 7-bit signs; a 4-bit scale per 16;
//   IQ2_S   (2.56 bpw): per 8, a 10-bit index and 8 sign bits; a 4-bit scale per 16;
//   IQ3_XXS (3.06 bpw): per 4, an 8-bit index; per 32, four 7-bit signs and a 4-bit scale;
//   IQ3_S   (3.44 bpw): per 4, a 9-bit index; 8 sign bits per 8; a 4-bit scale per 32;
//   IQ1_S   (1.56 bpw): per 8, an 11-bit index of levels -1/0/+1; per 32, a 3-bit scale
//                       and the sign of a shift of 1/8 added to every level;
//   IQ1_M   (1.75 bpw): IQ1_S with the shift's sign per 8, 3-bit scales per 16, and
//                       the fp16 scale spread over the top nibbles of the scale words.
#include <cstdint>

#include "formats/fp16.h"
#include "formats/ggml_types.h"

namespace kestrel {

struct BlockIQ2_XXS {
  uint16_t d;
  uint16_t qs[32];  // per 32: two words of indices (bytes), two of 4 x 7 sign bits + scale in the top 4
};
static_assert(sizeof(BlockIQ2_XXS) == 66);

struct BlockIQ2_XS {
  uint16_t d;
  uint16_t qs[32];      // per 8: index in the low 9 bits, 7 sign bits above
  uint8_t scales[8];    // per 32: low nibble for the first 16, high nibble for the second
};
static_assert(sizeof(BlockIQ2_XS) == 74);

struct BlockIQ2_S {
  uint16_t d;
  uint8_t qs[64];       // 32 low index bytes, then 32 sign bytes
  uint8_t qh[8];        // per 32: the indices' bits 8-9, two per group of 8
  uint8_t scales[8];
};
static_assert(sizeof(BlockIQ2_S) == 82);

struct BlockIQ3_XXS {
  uint16_t d;
  uint8_t qs[96];       // 64 index bytes (one per 4 weights), then per 32 a word of 4 x 7 sign bits + scale
};
static_assert(sizeof(BlockIQ3_XXS) == 98);

struct BlockIQ3_S {
  uint16_t d;
  uint8_t qs[64];       // low 8 index bits, one per 4 weights
  uint8_t qh[8];        // per 32: the indices' ninth bits
  uint8_t signs[32];    // one bit per weight
  uint8_t scales[4];    // per 64: low nibble for the first 32, high for the second
};
static_assert(sizeof(BlockIQ3_S) == 110);

struct BlockIQ1_S {
  uint16_t d;
  uint8_t qs[32];       // low 8 index bits per 8 weights
  uint16_t qh[8];       // per 32: 4 x 3 high index bits, scale in bits 12-14, shift sign in bit 15
};
static_assert(sizeof(BlockIQ1_S) == 50);

struct BlockIQ1_M {
  uint8_t qs[32];
  uint8_t qh[16];       // per 16: 3 high index bits + shift sign for each group of 8 (a nibble each)
  uint8_t scales[8];    // 4 words: 3-bit scales per 16 in bits 0-11, fp16 scale nibbles in 12-15
};
static_assert(sizeof(BlockIQ1_M) == 56);

inline bool is_iq_grid_type(GgmlType t) {
  switch (t) {
    case GgmlType::IQ2_XXS: case GgmlType::IQ2_XS: case GgmlType::IQ2_S: case GgmlType::IQ3_XXS:
    case GgmlType::IQ3_S: case GgmlType::IQ1_S: case GgmlType::IQ1_M: return true;
    default: return false;
  }
}

// One 256-weight block as integers: weight j = d * ls[j / 16] * q[j]. The
// IQ1 levels are held in eighths (8 * level +- 1, the shift) so they stay
// integers; `d` carries the 1/8.
struct IqLevels {
  int8_t q[256];
  int16_t ls[16];
  float d;
};

// Block `block` of a row of an is_iq_grid_type() type, decoded.
void iq_levels(GgmlType type, const void* row, int64_t block, IqLevels& out);

// n weights (a multiple of 256): the values ggml's dequantize_row_* gives, bit for bit.
void dequantize_row_iq(GgmlType type, const void* row, float* y, int64_t n);

// The fp16 scale of an IQ1_M block, gathered from its scale words.
uint16_t iq1m_scale(const BlockIQ1_M& b);

// A block's fp16 scale times its format's constant (1/8 for IQ2 and IQ1,
// whose levels are eighths; 1/4 for IQ3_XXS): IqLevels::d.
inline float iq_block_scale(const BlockIQ2_XXS& b) { return fp16_to_fp32(b.d) * 0.125f; }
inline float iq_block_scale(const BlockIQ2_XS& b) { return fp16_to_fp32(b.d) * 0.125f; }
inline float iq_block_scale(const BlockIQ2_S& b) { return fp16_to_fp32(b.d) * 0.125f; }
inline float iq_block_scale(const BlockIQ3_XXS& b) { return fp16_to_fp32(b.d) * 0.25f; }
inline float iq_block_scale(const BlockIQ3_S& b) { return fp16_to_fp32(b.d); }
inline float iq_block_scale(const BlockIQ1_S& b) { return fp16_to_fp32(b.d) * 0.125f; }
inline float iq_block_scale(const BlockIQ1_M& b) { return fp16_to_fp32(iq1m_scale(b)) * 0.125f; }

}  // namespace kestrel

namespace kestrel {

// Writes n weights (a multiple of 256) as an IQ1-IQ3 type. `importance`:
// an importance matrix's row (imatrix.h), weighting each weight's error;
// without one, x² weighs it. Our own search (iq_quantize.cpp), not ggml's:
// per sub-block a sweep of scales, each group of 8 (IQ3: 4) fitted to its
// nearest lattice points, then the scales rounded to the format's and the
// groups fitted again against the rounded scale.
void quantize_row_iq(GgmlType type, const float* x, void* dst, int64_t n, const float* importance = nullptr);

}  // namespace kestrel

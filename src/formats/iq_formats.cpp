// Decoding of the IQ1-IQ3 formats into integer levels (iq_formats.h),
// following ggml's dequantize_row_iq* field by field.
#include "formats/iq_formats.h"

#include <cstring>

#include "core/error.h"
#include "formats/fp16.h"
#include "formats/iq_grids.h"

namespace kestrel {
namespace {

// 8 grid magnitudes with an 8-bit sign pattern, as levels.
inline void signed8(uint64_t grid, uint8_t signs, int8_t* q) {
  for (int j = 0; j < 8; j++) {
    const int m = static_cast<int>((grid >> (8 * j)) & 0xFF);
    q[j] = static_cast<int8_t>((signs >> j) & 1 ? -m : m);
  }
}

// Two 4-magnitude entries (elements 0-3 and 4-7) with one sign pattern.
inline void signed4x2(uint32_t lo, uint32_t hi, uint8_t signs, int8_t* q) {
  signed8(lo | (static_cast<uint64_t>(hi) << 32), signs, q);
}

inline int odd_scale(uint32_t s) { return static_cast<int>(2 * s + 1); }

uint32_t word32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void levels_iq2_xxs(const BlockIQ2_XXS& b, IqLevels& L) {
  L.d = iq_block_scale(b);
  for (int ib = 0; ib < 8; ib++) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(b.qs + 4 * ib);
    const uint32_t idx = word32(bytes), aux = word32(bytes + 4);
    for (int l = 0; l < 4; l++)
      signed8(kIq2xxsGrid[(idx >> (8 * l)) & 0xFF], iq_signs8(aux >> (7 * l)), L.q + 32 * ib + 8 * l);
    L.ls[2 * ib] = L.ls[2 * ib + 1] = static_cast<int16_t>(odd_scale(aux >> 28));
  }
}

void levels_iq2_xs(const BlockIQ2_XS& b, IqLevels& L) {
  L.d = iq_block_scale(b);
  for (int g = 0; g < 32; g++) signed8(kIq2xsGrid[b.qs[g] & 511], iq_signs8(b.qs[g] >> 9), L.q + 8 * g);
  for (int ib = 0; ib < 8; ib++) {
    L.ls[2 * ib] = static_cast<int16_t>(odd_scale(b.scales[ib] & 0xF));
    L.ls[2 * ib + 1] = static_cast<int16_t>(odd_scale(b.scales[ib] >> 4));
  }
}

void levels_iq2_s(const BlockIQ2_S& b, IqLevels& L) {
  L.d = iq_block_scale(b);
  const uint8_t* signs = b.qs + 32;
  for (int g = 0; g < 32; g++) {
    const int ib = g / 4, l = g % 4;
    signed8(kIq2sGrid[b.qs[g] | ((b.qh[ib] << (8 - 2 * l)) & 0x300)], signs[g], L.q + 8 * g);
  }
  for (int ib = 0; ib < 8; ib++) {
    L.ls[2 * ib] = static_cast<int16_t>(odd_scale(b.scales[ib] & 0xF));
    L.ls[2 * ib + 1] = static_cast<int16_t>(odd_scale(b.scales[ib] >> 4));
  }
}

void levels_iq3_xxs(const BlockIQ3_XXS& b, IqLevels& L) {
  L.d = iq_block_scale(b);
  for (int ib = 0; ib < 8; ib++) {
    const uint32_t aux = word32(b.qs + 64 + 4 * ib);
    const uint8_t* q3 = b.qs + 8 * ib;
    for (int l = 0; l < 4; l++)
      signed4x2(kIq3xxsGrid[q3[2 * l]], kIq3xxsGrid[q3[2 * l + 1]], iq_signs8(aux >> (7 * l)), L.q + 32 * ib + 8 * l);
    L.ls[2 * ib] = L.ls[2 * ib + 1] = static_cast<int16_t>(odd_scale(aux >> 28));
  }
}

void levels_iq3_s(const BlockIQ3_S& b, IqLevels& L) {
  L.d = iq_block_scale(b);
  for (int ib = 0; ib < 8; ib++) {
    const uint8_t* qs = b.qs + 8 * ib;
    const int qh = b.qh[ib];
    for (int l = 0; l < 4; l++) {
      const uint32_t lo = kIq3sGrid[qs[2 * l] | ((qh << (8 - 2 * l)) & 256)];
      const uint32_t hi = kIq3sGrid[qs[2 * l + 1] | ((qh << (7 - 2 * l)) & 256)];
      signed4x2(lo, hi, b.signs[4 * ib + l], L.q + 32 * ib + 8 * l);
    }
    L.ls[2 * ib] = L.ls[2 * ib + 1] = static_cast<int16_t>(odd_scale((b.scales[ib / 2] >> (4 * (ib % 2))) & 0xF));
  }
}

// 8 IQ1 levels in eighths: 8 * grid + shift (shift +-1).
inline void eighths8(uint64_t grid, int shift, int8_t* q) {
  for (int j = 0; j < 8; j++) q[j] = static_cast<int8_t>(8 * static_cast<int8_t>(grid >> (8 * j)) + shift);
}

void levels_iq1_s(const BlockIQ1_S& b, IqLevels& L) {
  L.d = iq_block_scale(b);
  for (int ib = 0; ib < 8; ib++) {
    const uint32_t qh = b.qh[ib];
    const int shift = qh & 0x8000 ? -1 : 1;
    for (int l = 0; l < 4; l++)
      eighths8(kIq1sGrid[b.qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8)], shift, L.q + 32 * ib + 8 * l);
    L.ls[2 * ib] = L.ls[2 * ib + 1] = static_cast<int16_t>(odd_scale((qh >> 12) & 7));
  }
}

void scale_words(const BlockIQ1_M& b, uint16_t sc[4]) { std::memcpy(sc, b.scales, 8); }

void levels_iq1_m(const BlockIQ1_M& b, IqLevels& L) {
  uint16_t sc[4];
  scale_words(b, sc);
  L.d = iq_block_scale(b);
  for (int ib = 0; ib < 8; ib++) {
    for (int l = 0; l < 4; l++) {
      const uint32_t qh = b.qh[2 * ib + l / 2] >> (4 * (l % 2));  // this group's nibble
      eighths8(kIq1sGrid[b.qs[4 * ib + l] | ((qh & 7) << 8)], qh & 8 ? -1 : 1, L.q + 32 * ib + 8 * l);
    }
    L.ls[2 * ib] = static_cast<int16_t>(odd_scale((sc[ib / 2] >> (6 * (ib % 2))) & 7));
    L.ls[2 * ib + 1] = static_cast<int16_t>(odd_scale((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7));
  }
}

template <typename Block>
const Block& at(const void* row, int64_t i) {
  return static_cast<const Block*>(row)[i];
}

}  // namespace

uint16_t iq1m_scale(const BlockIQ1_M& b) {
  uint16_t sc[4];
  scale_words(b, sc);
  return static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000));
}

void iq_levels(GgmlType type, const void* row, int64_t i, IqLevels& L) {
  switch (type) {
    case GgmlType::IQ2_XXS: return levels_iq2_xxs(at<BlockIQ2_XXS>(row, i), L);
    case GgmlType::IQ2_XS: return levels_iq2_xs(at<BlockIQ2_XS>(row, i), L);
    case GgmlType::IQ2_S: return levels_iq2_s(at<BlockIQ2_S>(row, i), L);
    case GgmlType::IQ3_XXS: return levels_iq3_xxs(at<BlockIQ3_XXS>(row, i), L);
    case GgmlType::IQ3_S: return levels_iq3_s(at<BlockIQ3_S>(row, i), L);
    case GgmlType::IQ1_S: return levels_iq1_s(at<BlockIQ1_S>(row, i), L);
    case GgmlType::IQ1_M: return levels_iq1_m(at<BlockIQ1_M>(row, i), L);
    default: throw Error("iq_levels: " + std::string(type_name(type)) + " is not an IQ1-IQ3 type");
  }
}

void dequantize_row_iq(GgmlType type, const void* row, float* y, int64_t n) {
  IqLevels L;
  for (int64_t i = 0; i < n / 256; i++, y += 256) {
    iq_levels(type, row, i, L);
    for (int k = 0; k < 16; k++) {
      const float dl = L.d * static_cast<float>(L.ls[k]);  // ggml's per-group scale (up to a power of two)
      for (int j = 16 * k; j < 16 * k + 16; j++) y[j] = dl * static_cast<float>(L.q[j]);
    }
  }
}

}  // namespace kestrel

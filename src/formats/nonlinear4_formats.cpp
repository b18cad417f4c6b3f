// Writers fit each block's scale to the table: start from the scale that
// maps the largest-magnitude weight onto the table's extreme, try nearby
// inverse scales, and keep the least-squares scale of the best assignment
// (weights x^2, so large weights, which dominate dot products, fit best) —
// the search ggml's reference quantizer makes, in our own code.
#include "formats/nonlinear4_formats.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "formats/fp16.h"
#include "formats/scale_fit.h"

namespace kestrel {
namespace {

// Index of the table entry nearest to v (the table sorted ascending).
int nearest_iq4(float v) {
  const int8_t* t = kIq4nlValues;
  if (v <= t[0]) return 0;
  if (v >= t[15]) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    (v < t[mid] ? hi : lo) = mid;
  }
  return v - static_cast<float>(t[lo]) < static_cast<float>(t[hi]) - v ? lo : hi;
}

// Best scale for 32 weights against the IQ4 table (weights w, or x² when
// null); the indices in L.
float fit_iq4_block(const float* x, const float* w, uint8_t* L) {
  float amax = 0, max = 0;
  for (int j = 0; j < 32; j++)
    if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), max = x[j];
  if (amax < 1e-15f) {
    std::fill(L, L + 32, static_cast<uint8_t>(8));  // table value 1 times scale 0
    return 0;
  }
  float best_d = 0, best = -1;
  uint8_t cand[32];
  for (int step = -7; step <= 7; step++) {
    const float id = (step + kIq4nlValues[0]) / max;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; j++) {
      cand[j] = static_cast<uint8_t>(nearest_iq4(id * x[j]));
      const float q = kIq4nlValues[cand[j]], wj = w ? w[j] : x[j] * x[j];
      sumqx += wj * q * x[j];
      sumq2 += wj * q * q;
    }
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      best = sumqx * sumqx / sumq2;
      best_d = sumqx / sumq2;
      std::memcpy(L, cand, 32);
    }
  }
  return best_d;
}

void pack_nibbles(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < 16; j++) qs[j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
}

void reindex(const float* x, float d, uint8_t* L) {
  const float id = d ? 1 / d : 0;
  for (int j = 0; j < 32; j++) L[j] = static_cast<uint8_t>(nearest_iq4(id * x[j]));
}

}  // namespace

void quantize_row_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t n, const float* imp) {
  uint8_t L[32];
  float w[32];
  for (int64_t i = 0; i < n / 32; i++, x += 32) {
    if (imp) importance_weights(x, imp + 32 * i, 32, 32, w);
    y[i].d = fp32_to_fp16(fit_iq4_block(x, imp ? w : nullptr, L));
    reindex(x, fp16_to_fp32(y[i].d), L);  // against the scale actually stored
    pack_nibbles(L, y[i].qs);
  }
}

void quantize_row_iq4_xs(const float* x, BlockIQ4_XS* y, int64_t n, const float* imp) {
  uint8_t L[32];
  float w[256];
  for (int64_t i = 0; i < n / 256; i++, x += 256) {
    if (imp) importance_weights(x, imp + 256 * i, 256, 256, w);
    float scales[8], amax = 0, max = 0;
    for (int j = 0; j < 8; j++) {
      scales[j] = fit_iq4_block(x + 32 * j, imp ? w + 32 * j : nullptr, L);
      if (std::fabs(scales[j]) > amax) amax = std::fabs(scales[j]), max = scales[j];
    }
    std::memset(&y[i], 0, sizeof y[i]);
    if (amax == 0) continue;
    // Block scales become ls - 32 in -32..31 times d; the largest maps to -32.
    y[i].d = fp32_to_fp16(max / -32);
    const float d = fp16_to_fp32(y[i].d), id = d ? 1 / d : 0;
    for (int j = 0; j < 8; j++) {
      const int l = std::clamp(static_cast<int>(std::lround(id * scales[j])), -32, 31) + 32;
      y[i].scales_l[j / 2] |= static_cast<uint8_t>((l & 0xF) << (4 * (j % 2)));
      y[i].scales_h |= static_cast<uint16_t>((l >> 4) << (2 * j));
      reindex(x + 32 * j, d * static_cast<float>(l - 32), L);
      pack_nibbles(L, y[i].qs + 16 * j);
    }
  }
}

void quantize_row_mxfp4(const float* x, BlockMXFP4* y, int64_t n) {
  for (int64_t i = 0; i < n / 32; i++, x += 32) {
    float amax = 0;
    for (int j = 0; j < 32; j++) amax = std::max(amax, std::fabs(x[j]));
    // The exponent puts the largest magnitude in the top binade of E2M1 (4..6 of 6, doubled: 8..12).
    const int e = amax > 0 ? std::clamp(static_cast<int>(std::floor(std::log2(amax))) - 2 + 127, 0, 254) : 0;
    y[i].e = static_cast<uint8_t>(e);
    const float d = e8m0_to_fp32_half(y[i].e), id = amax > 0 ? 1 / d : 0;
    uint8_t L[32];
    for (int j = 0; j < 32; j++) {
      const float v = x[j] * id;
      int best = 0;
      for (int k = 1; k < 16; k++)
        if (std::fabs(v - kMxfp4Values[k]) < std::fabs(v - kMxfp4Values[best])) best = k;
      L[j] = static_cast<uint8_t>(best);
    }
    pack_nibbles(L, y[i].qs);
  }
}

void dequantize_row_iq4_nl(const BlockIQ4_NL* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / 32; i++, y += 32) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < 16; j++) {
      y[j] = d * kIq4nlValues[x[i].qs[j] & 0xF];
      y[j + 16] = d * kIq4nlValues[x[i].qs[j] >> 4];
    }
  }
}

void dequantize_row_iq4_xs(const BlockIQ4_XS* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / 256; i++) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < 8; j++, y += 32) {
      const float dl = d * static_cast<float>(iq4xs_scale(x[i], j) - 32);
      const uint8_t* qs = x[i].qs + 16 * j;
      for (int l = 0; l < 16; l++) {
        y[l] = dl * kIq4nlValues[qs[l] & 0xF];
        y[l + 16] = dl * kIq4nlValues[qs[l] >> 4];
      }
    }
  }
}

void dequantize_row_mxfp4(const BlockMXFP4* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / 32; i++, y += 32) {
    const float d = e8m0_to_fp32_half(x[i].e);
    for (int j = 0; j < 16; j++) {
      y[j] = d * kMxfp4Values[x[i].qs[j] & 0xF];
      y[j + 16] = d * kMxfp4Values[x[i].qs[j] >> 4];
    }
  }
}

}  // namespace kestrel

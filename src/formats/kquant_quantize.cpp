// Writing k-quant super-blocks: each sub-block's scale (and min) is fitted by
// weighted least squares over a small sweep of candidate grids, then the
// sub-block scales themselves are quantized (6 bits for Q4_K/Q5_K, int8 for
// Q6_K) and the weights re-rounded against the scales actually stored — so
// what is written is exactly what a reader reconstructs. The sweep follows
// the idea of ggml's reference quantizer (candidate inverse scales around
// nmax/range, keep the one with least weighted error); the weights favour
// large magnitudes, whose errors cost most in a dot product.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "formats/fp16.h"
#include "formats/kquant_formats.h"
#include "formats/scale_fit.h"

namespace kestrel {
namespace {

inline int round_int(float v) { return static_cast<int>(std::lround(v)); }

}  // namespace

// Asymmetric sub-block fit: x ~ scale * l - min over levels 0..nmax.
ScaleMin fit_scale_min(const float* x, const float* w, int n, int nmax, uint8_t* L) {
  float lo = x[0], hi = x[0], sw = 0, sx = 0;
  for (int i = 0; i < n; i++) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    sw += w[i];
    sx += w[i] * x[i];
  }
  lo = std::min(lo, 0.0f);  // the min is stored as a non-negative offset
  if (hi <= lo) {
    std::fill(L, L + n, 0);
    return {0, -lo};
  }
  auto error_of = [&](float scale, float min, const uint8_t* l) {
    float e = 0;
    for (int i = 0; i < n; i++) {
      const float d = scale * l[i] - min - x[i];
      e += w[i] * d * d;
    }
    return e;
  };
  ScaleMin best{(hi - lo) / nmax, -lo};
  for (int i = 0; i < n; i++) L[i] = static_cast<uint8_t>(std::clamp(round_int((x[i] - lo) / best.scale), 0, nmax));
  float best_err = error_of(best.scale, best.min, L);
  uint8_t cand[32];
  for (int step = 0; step <= 20; step++) {
    const float iscale = (nmax - 1.0f + 0.1f * step) / (hi - lo);
    float sl = 0, sl2 = 0, sxl = 0;
    for (int i = 0; i < n; i++) {
      const int l = std::clamp(round_int(iscale * (x[i] - lo)), 0, nmax);
      cand[i] = static_cast<uint8_t>(l);
      sl += w[i] * l;
      sl2 += w[i] * l * l;
      sxl += w[i] * l * x[i];
    }
    // Least squares for x ~ a*l + b over these levels; b must stay <= 0.
    const float det = sw * sl2 - sl * sl;
    if (det <= 0) continue;
    float a = (sw * sxl - sx * sl) / det, b = (sl2 * sx - sl * sxl) / det;
    if (b > 0) {
      b = 0;
      a = sxl / sl2;
    }
    const float err = error_of(a, -b, cand);
    if (err < best_err) {
      best_err = err;
      best = {a, -b};
      std::memcpy(L, cand, static_cast<size_t>(n));
    }
  }
  return best;
}

// Symmetric sub-block fit: x ~ scale * l, l in [-nmax, nmax - 1]. The scale
// keeps the sign of the largest-magnitude element so that it can use -nmax.
float fit_scale_symmetric(const float* x, const float* wt, int n, int nmax) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; i++)
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
  if (amax == 0) return 0;
  float best_scale = max / -nmax, best = -1;
  for (int step = -9; step <= 9; step++) {
    const float iscale = -(nmax + 0.1f * step) / max;
    float sxl = 0, sl2 = 0;
    for (int i = 0; i < n; i++) {
      const int l = std::clamp(round_int(iscale * x[i]), -nmax, nmax - 1);
      const float w = wt ? wt[i] : x[i] * x[i];
      sxl += w * x[i] * l;
      sl2 += w * l * l;
    }
    // Least-squares scale for these levels; sxl^2/sl2 is the error it removes.
    if (sl2 > 0 && sxl * sxl / sl2 > best) {
      best = sxl * sxl / sl2;
      best_scale = sxl / sl2;
    }
  }
  return best_scale;
}

void importance_weights(const float* x, const float* importance, int n, int block, float* w) {
  double sum2 = 0;
  for (int i = 0; i < block; i++) sum2 += double(x[i]) * x[i];
  const float sigma2 = static_cast<float>(2 * sum2 / block);
  for (int i = 0; i < n; i++) w[i] = importance[i] * std::sqrt(sigma2 + x[i] * x[i]);
}

namespace {

// 8 six-bit scales and 8 six-bit mins packed into 12 bytes, as ggml packs them.
void pack_scales_k4(const uint8_t* ls, const uint8_t* lm, uint8_t* q) {
  std::memset(q, 0, kKScaleBytes);
  for (int j = 0; j < 8; j++) {
    if (j < 4) {
      q[j] = ls[j];
      q[j + 4] = lm[j];
    } else {
      q[j + 4] = static_cast<uint8_t>((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
      q[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
      q[j] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
    }
  }
}

// Shared by Q4_K and Q5_K: fit the 8 sub-blocks, store d/dmin and the packed
// 6-bit scales, and return the levels re-rounded against the stored scales.
void quantize_superblock_k4(const float* x, const float* imp, int nmax, uint16_t& d_out, uint16_t& dmin_out,
                            uint8_t* scales_out, uint8_t* L) {
  float scales[8], mins[8], w[32], wimp[kQK_K];
  if (imp) importance_weights(x, imp, kQK_K, kQK_K, wimp);
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; j++) {
    const float* xs = x + 32 * j;
    float sum2 = 0;
    for (int l = 0; l < 32; l++) sum2 += xs[l] * xs[l];
    const float rms = std::sqrt(sum2 / 32);
    for (int l = 0; l < 32; l++) w[l] = imp ? wimp[32 * j + l] : rms + std::fabs(xs[l]);
    const ScaleMin sm = fit_scale_min(xs, w, 32, nmax, L + 32 * j);
    scales[j] = sm.scale;
    mins[j] = sm.min;
    max_scale = std::max(max_scale, sm.scale);
    max_min = std::max(max_min, sm.min);
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0, inv_min = max_min > 0 ? 63.0f / max_min : 0;
  uint8_t ls[8], lm[8];
  for (int j = 0; j < 8; j++) {
    ls[j] = static_cast<uint8_t>(std::min(63, round_int(inv_scale * scales[j])));
    lm[j] = static_cast<uint8_t>(std::min(63, round_int(inv_min * mins[j])));
  }
  pack_scales_k4(ls, lm, scales_out);
  d_out = fp32_to_fp16(max_scale / 63.0f);
  dmin_out = fp32_to_fp16(max_min / 63.0f);
  const float d = fp16_to_fp32(d_out), dmin = fp16_to_fp32(dmin_out);
  for (int j = 0; j < 8; j++) {
    const float ds = d * ls[j], dm = dmin * lm[j];
    if (ds == 0) continue;  // every level decodes to -dm; keep the fit's levels
    for (int l = 0; l < 32; l++)
      L[32 * j + l] = static_cast<uint8_t>(std::clamp(round_int((x[32 * j + l] + dm) / ds), 0, nmax));
  }
}

}  // namespace

void quantize_row_q4_K(const float* x, BlockQ4_K* y, int64_t n, const float* imp) {
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; i++, x += kQK_K) {
    quantize_superblock_k4(x, imp ? imp + i * kQK_K : nullptr, 15, y[i].d, y[i].dmin, y[i].scales, L);
    uint8_t* q = y[i].qs;
    for (int j = 0; j < kQK_K; j += 64, q += 32)
      for (int l = 0; l < 32; l++) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
  }
}

void quantize_row_q5_K(const float* x, BlockQ5_K* y, int64_t n, const float* imp) {
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; i++, x += kQK_K) {
    quantize_superblock_k4(x, imp ? imp + i * kQK_K : nullptr, 31, y[i].d, y[i].dmin, y[i].scales, L);
    std::memset(y[i].qh, 0, sizeof y[i].qh);
    uint8_t* ql = y[i].qs;
    uint8_t m1 = 1, m2 = 2;
    for (int j = 0; j < kQK_K; j += 64, ql += 32) {
      for (int l = 0; l < 32; l++) {
        int l1 = L[j + l], l2 = L[j + l + 32];
        if (l1 > 15) l1 -= 16, y[i].qh[l] |= m1;
        if (l2 > 15) l2 -= 16, y[i].qh[l] |= m2;
        ql[l] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
      m1 = static_cast<uint8_t>(m1 << 2);
      m2 = static_cast<uint8_t>(m2 << 2);
    }
  }
}

void quantize_row_q6_K(const float* x, BlockQ6_K* y, int64_t n, const float* imp) {
  int L[kQK_K];
  float w[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; i++, x += kQK_K) {
    if (imp) importance_weights(x, imp + i * kQK_K, kQK_K, kQK_K, w);
    float scales[16], max_scale = 0, amax_scale = 0;
    for (int j = 0; j < 16; j++) {
      scales[j] = fit_scale_symmetric(x + 16 * j, imp ? w + 16 * j : nullptr, 16, 32);
      if (std::fabs(scales[j]) > amax_scale) amax_scale = std::fabs(scales[j]), max_scale = scales[j];
    }
    std::memset(&y[i], 0, sizeof y[i]);
    if (amax_scale == 0) continue;  // all zero: d = 0 decodes every weight to 0
    // The largest sub-scale maps to -128 so int8 covers the full range.
    const float iscale = -128.0f / max_scale;
    y[i].d = fp32_to_fp16(1 / iscale);
    for (int j = 0; j < 16; j++) y[i].scales[j] = static_cast<int8_t>(std::min(127, round_int(iscale * scales[j])));
    const float d = fp16_to_fp32(y[i].d);
    for (int j = 0; j < 16; j++) {
      const float ds = d * y[i].scales[j];
      for (int l = 0; l < 16; l++)
        L[16 * j + l] = ds == 0 ? 32 : std::clamp(round_int(x[16 * j + l] / ds), -32, 31) + 32;
    }
    uint8_t* ql = y[i].ql;
    uint8_t* qh = y[i].qh;
    for (int j = 0; j < kQK_K; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; l++) {
        const int q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96];
        ql[l] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
      }
    }
  }
}

// Q2_K and Q3_K keep the low two bits of element 128h + 32j + l in bits 2j of qs[32h + l].
static void pack_2bit_levels(const uint8_t* L, uint8_t* qs) {
  for (int h = 0; h < 2; h++)
    for (int l = 0; l < 32; l++) {
      const uint8_t* q = L + 128 * h + l;
      qs[32 * h + l] = static_cast<uint8_t>((q[0] & 3) | ((q[32] & 3) << 2) | ((q[64] & 3) << 4) | ((q[96] & 3) << 6));
    }
}

void quantize_row_q2_K(const float* x, BlockQ2_K* y, int64_t n, const float* imp) {
  uint8_t L[kQK_K];
  float wimp[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; i++, x += kQK_K) {
    if (imp) importance_weights(x, imp + i * kQK_K, kQK_K, kQK_K, wimp);
    float scales[16], mins[16], w[16], max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; j++) {
      for (int l = 0; l < 16; l++) w[l] = imp ? wimp[16 * j + l] : std::fabs(x[16 * j + l]);
      const ScaleMin sm = fit_scale_min(x + 16 * j, w, 16, 3, L + 16 * j);
      scales[j] = sm.scale;
      mins[j] = sm.min;
      max_scale = std::max(max_scale, sm.scale);
      max_min = std::max(max_min, sm.min);
    }
    // Sub-block scales and mins in 4 bits under fp16 d and dmin.
    const float inv_scale = max_scale > 0 ? 15.0f / max_scale : 0, inv_min = max_min > 0 ? 15.0f / max_min : 0;
    y[i].d = fp32_to_fp16(max_scale / 15.0f);
    y[i].dmin = fp32_to_fp16(max_min / 15.0f);
    const float d = fp16_to_fp32(y[i].d), dmin = fp16_to_fp32(y[i].dmin);
    for (int j = 0; j < 16; j++) {
      const int ls = std::min(15, round_int(inv_scale * scales[j])), lm = std::min(15, round_int(inv_min * mins[j]));
      y[i].scales[j] = static_cast<uint8_t>(ls | (lm << 4));
      const float ds = d * static_cast<float>(ls), dm = dmin * static_cast<float>(lm);
      if (ds == 0) continue;
      for (int l = 0; l < 16; l++)
        L[16 * j + l] = static_cast<uint8_t>(std::clamp(round_int((x[16 * j + l] + dm) / ds), 0, 3));
    }
    pack_2bit_levels(L, y[i].qs);
  }
}

void quantize_row_q3_K(const float* x, BlockQ3_K* y, int64_t n, const float* imp) {
  uint8_t L[kQK_K];
  float w[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; i++, x += kQK_K) {
    if (imp) importance_weights(x, imp + i * kQK_K, kQK_K, kQK_K, w);
    float scales[16], amax = 0, max_scale = 0;
    for (int j = 0; j < 16; j++) {
      scales[j] = fit_scale_symmetric(x + 16 * j, imp ? w + 16 * j : nullptr, 16, 4);
      if (std::fabs(scales[j]) > amax) amax = std::fabs(scales[j]), max_scale = scales[j];
    }
    std::memset(&y[i], 0, sizeof y[i]);
    // Signed 6-bit sub-block scales under fp16 d: the largest maps to -32.
    const float iscale = amax > 0 ? -32.0f / max_scale : 0;
    y[i].d = fp32_to_fp16(amax > 0 ? 1 / iscale : 0);
    const float d = fp16_to_fp32(y[i].d);
    for (int j = 0; j < 16; j++) {
      const int ls = std::clamp(round_int(iscale * scales[j]), -32, 31);
      const int biased = ls + 32;
      if (j < 8) y[i].scales[j] = static_cast<uint8_t>(biased & 0xF);
      else y[i].scales[j - 8] |= static_cast<uint8_t>((biased & 0xF) << 4);
      y[i].scales[8 + j % 4] |= static_cast<uint8_t>((biased >> 4) << (2 * (j / 4)));
      const float ds = d * static_cast<float>(ls);
      for (int l = 0; l < 16; l++)
        L[16 * j + l] = static_cast<uint8_t>(ds == 0 ? 4 : std::clamp(round_int(x[16 * j + l] / ds), -4, 3) + 4);
    }
    for (int e = 0; e < kQK_K; e++)
      if (L[e] > 3) y[i].hmask[e % 32] |= static_cast<uint8_t>(1 << (e / 32));
    pack_2bit_levels(L, y[i].qs);
  }
}

}  // namespace kestrel

#include "formats/q4q5_formats.h"

#include <algorithm>
#include <cmath>

#include "formats/fp16.h"
#include "formats/scale_fit.h"

namespace kestrel {
namespace {

struct MinMax {
  float min, max;
};
MinMax min_max(const float* x) {
  MinMax r{x[0], x[0]};
  for (int j = 1; j < kQK32; j++) r.min = std::min(r.min, x[j]), r.max = std::max(r.max, x[j]);
  return r;
}

// Levels 0..nmax of x ~ d * l + min; the level nibbles and (nmax 31) fifth bits written into qs / qh.
void pack_levels(const float* x, float min, float id, int nmax, uint8_t* qs, uint8_t* qh) {
  uint32_t high = 0;
  for (int j = 0; j < kQK32 / 2; j++) {
    const int l0 = std::clamp(static_cast<int>(std::floor((x[j] - min) * id + 0.5f)), 0, nmax);
    const int l1 = std::clamp(static_cast<int>(std::floor((x[j + 16] - min) * id + 0.5f)), 0, nmax);
    qs[j] = static_cast<uint8_t>((l0 & 0xF) | ((l1 & 0xF) << 4));
    high |= static_cast<uint32_t>((l0 >> 4) & 1) << j;
    high |= static_cast<uint32_t>((l1 >> 4) & 1) << (j + 16);
  }
  if (qh) std::memcpy(qh, &high, 4);
}

// Q4_1 / Q5_1 (levels 0..nmax above a minimum). Without an importance row,
// ggml's reference: min and max of the block, levels against them as
// computed; with one, the weighted least-squares (scale, min) and levels
// against the pair as stored.
template <typename Block>
void quantize_with_min(const float* x, Block* y, int64_t n, const float* imp, int nmax) {
  float w[kQK32];
  uint8_t L[kQK32];
  for (int64_t i = 0; i < n / kQK32; i++, x += kQK32) {
    float min, id;
    if (imp) {
      importance_weights(x, imp + i * kQK32, kQK32, kQK32, w);
      const ScaleMin sm = fit_scale_min(x, w, kQK32, nmax, L);
      y[i].d = fp32_to_fp16(sm.scale);
      y[i].m = fp32_to_fp16(-sm.min);
      const float d = fp16_to_fp32(y[i].d);
      min = fp16_to_fp32(y[i].m), id = d ? 1 / d : 0;
    } else {
      const MinMax mm = min_max(x);
      const float d = (mm.max - mm.min) / static_cast<float>(nmax);
      y[i].d = fp32_to_fp16(d);
      y[i].m = fp32_to_fp16(mm.min);
      min = mm.min, id = d ? 1 / d : 0;
    }
    uint8_t* qh = nullptr;
    if constexpr (requires { y[i].qh; }) qh = y[i].qh;
    pack_levels(x, min, id, nmax, y[i].qs, qh);
  }
}

}  // namespace

void quantize_row_q4_1(const float* x, BlockQ4_1* y, int64_t n, const float* imp) {
  quantize_with_min(x, y, n, imp, 15);
}

void quantize_row_q5_1(const float* x, BlockQ5_1* y, int64_t n, const float* imp) {
  quantize_with_min(x, y, n, imp, 31);
}

void quantize_row_q5_0(const float* x, BlockQ5_0* y, int64_t n, const float* imp) {
  float w[kQK32];
  for (int64_t i = 0; i < n / kQK32; i++, x += kQK32) {
    // The element of largest magnitude (with its sign) maps to level -16;
    // with an importance matrix, the weighted least-squares scale.
    float amax = 0, max = 0;
    for (int j = 0; j < kQK32; j++)
      if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), max = x[j];
    float d = max / -16;
    if (imp) {
      importance_weights(x, imp + i * kQK32, kQK32, kQK32, w);
      d = fit_scale_symmetric(x, w, kQK32, 16);
    }
    y[i].d = fp32_to_fp16(d);
    // Levels against the scale as stored with an importance row; without one as ggml's reference
    // (quantize_row_q5_0_ref) does, against the scale as computed: the bytes llama-quantize writes.
    if (imp) d = fp16_to_fp32(y[i].d);
    const float id = d ? 1 / d : 0;
    uint32_t high = 0;
    for (int j = 0; j < kQK32 / 2; j++) {
      const int l0 = std::clamp(static_cast<int>(x[j] * id + 16.5f), 0, 31);
      const int l1 = std::clamp(static_cast<int>(x[j + 16] * id + 16.5f), 0, 31);
      y[i].qs[j] = static_cast<uint8_t>((l0 & 0xF) | ((l1 & 0xF) << 4));
      high |= static_cast<uint32_t>((l0 >> 4) & 1) << j;
      high |= static_cast<uint32_t>((l1 >> 4) & 1) << (j + 16);
    }
    std::memcpy(y[i].qh, &high, 4);
  }
}

void quantize_row_q8_1(const float* x, BlockQ8_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK32; i++, x += kQK32) {
    float amax = 0;
    for (int j = 0; j < kQK32; j++) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127, id = amax != 0 ? 127 / amax : 0;
    int sum = 0;
    for (int j = 0; j < kQK32; j++) {
      y[i].qs[j] = static_cast<int8_t>(std::nearbyint(x[j] * id));
      sum += y[i].qs[j];
    }
    y[i].d = fp32_to_fp16(d);
    y[i].s = fp32_to_fp16(d * static_cast<float>(sum));
  }
}

void dequantize_row_q4_1(const BlockQ4_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK32; i++, y += kQK32) {
    const float d = fp16_to_fp32(x[i].d), m = fp16_to_fp32(x[i].m);
    for (int j = 0; j < kQK32 / 2; j++) {
      y[j] = static_cast<float>(x[i].qs[j] & 0xF) * d + m;
      y[j + 16] = static_cast<float>(x[i].qs[j] >> 4) * d + m;
    }
  }
}

void dequantize_row_q5_0(const BlockQ5_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK32; i++, y += kQK32) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < kQK32; j++) y[j] = static_cast<float>(q5_level(x[i].qs, x[i].qh, j) - 16) * d;
  }
}

void dequantize_row_q5_1(const BlockQ5_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK32; i++, y += kQK32) {
    const float d = fp16_to_fp32(x[i].d), m = fp16_to_fp32(x[i].m);
    for (int j = 0; j < kQK32; j++) y[j] = static_cast<float>(q5_level(x[i].qs, x[i].qh, j)) * d + m;
  }
}

}  // namespace kestrel

#include "kernels/isa_dispatch.h"
#include "kernels/kquant_dot.h"

#include <algorithm>
#include <cmath>

#include "formats/fp16.h"
#include "formats/fp8.h"
#include "hw/cpu_features.h"

namespace kestrel {

void quantize_row_q8_K(const float* x, BlockQ8_K* y, int64_t n) {
#ifdef KESTREL_HAVE_AVX2_KERNELS
  static const bool avx512 = isa_runs(IsaNeed::Avx512Vnni), avx2 = isa_runs(IsaNeed::Avx2);
  if (avx512) return quantize_row_q8_K_avx512(x, y, n);
  if (avx2) return quantize_row_q8_K_avx2(x, y, n);
#endif
  quantize_row_q8_K_scalar(x, y, n);
}

void quantize_row_q8_K_scalar(const float* x, BlockQ8_K* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; i++, x += kQK_K) {
    float amax = 0, max = 0;
    for (int j = 0; j < kQK_K; j++)
      if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), max = x[j];
    if (amax == 0) {
      y[i] = {};
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQK_K; j++)
      y[i].qs[j] = static_cast<int8_t>(std::min(127, static_cast<int>(std::nearbyint(iscale * x[j]))));
    for (int j = 0; j < kQK_K / 16; j++) {
      int sum = 0;
      for (int l = 0; l < 16; l++) sum += y[i].qs[16 * j + l];
      y[i].bsums[j] = static_cast<int16_t>(sum);
    }
    y[i].d = 1 / iscale;
  }
}

namespace {

// Q4_K and Q5_K: sub-block j holds elements 32j..32j+31: the low nibbles of
// qs[32 (j/2) ..] for even j, the high nibbles for odd j, plus (Q5_K) bit j of qh.
template <bool kFive, typename Block>
float dot_k4(const Block* w, const BlockQ8_K* x, int64_t n) {
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; i++) {
    int32_t sumi = 0, summ = 0;
    for (int j = 0; j < 8; j++) {
      int sc, m;
      unpack_scale_min_k4(w[i].scales, j, sc, m);
      const uint8_t* q = w[i].qs + 32 * (j / 2);
      int32_t dot = 0;
      for (int l = 0; l < 32; l++) {
        int level = (j % 2 ? q[l] >> 4 : q[l] & 0xF);
        if constexpr (kFive) level |= ((w[i].qh[l] >> j) & 1) << 4;
        dot += level * x[i].qs[32 * j + l];
      }
      sumi += sc * dot;
      summ += m * (x[i].bsums[2 * j] + x[i].bsums[2 * j + 1]);
    }
    sum +=
        x[i].d * (fp16_to_fp32(w[i].d) * static_cast<float>(sumi) - fp16_to_fp32(w[i].dmin) * static_cast<float>(summ));
  }
  return sum;
}

float dot_q4_K(const BlockQ4_K* w, const BlockQ8_K* x, int64_t n) { return dot_k4<false>(w, x, n); }
float dot_q5_K(const BlockQ5_K* w, const BlockQ8_K* x, int64_t n) { return dot_k4<true>(w, x, n); }

// Q6_K: element 128h + 32q + l has low bits in ql[64h + l + 32 (q & 1)]
// (high nibble when q >= 2), high bits (qh[32h + l] >> 2q) & 3, and scale
// scales[8h + 2q + l / 16]; value d * scale * (level - 32).
float dot_q6_K(const BlockQ6_K* w, const BlockQ8_K* x, int64_t n) {
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; i++) {
    int32_t sumi = 0;
    for (int h = 0; h < 2; h++)
      for (int q = 0; q < 4; q++)
        for (int l = 0; l < 32; l++) {
          const int lo = (w[i].ql[64 * h + l + 32 * (q & 1)] >> (q >= 2 ? 4 : 0)) & 0xF;
          const int level = lo | (((w[i].qh[32 * h + l] >> (2 * q)) & 3) << 4);
          sumi += w[i].scales[8 * h + 2 * q + l / 16] * (level - 32) * x[i].qs[128 * h + 32 * q + l];
        }
    sum += fp16_to_fp32(w[i].d) * x[i].d * static_cast<float>(sumi);
  }
  return sum;
}

float dot_fp8(const BlockFp8* w, const float* x, int64_t n) {
  const auto& table = e4m3_table();
  float sum = 0;
  for (int64_t i = 0; i < n / kQKFp8; i++) {
    float block = 0;
    for (int j = 0; j < kQKFp8; j++) block += table[w[i].qs[j]] * x[i * kQKFp8 + j];
    sum += fp16_to_fp32(w[i].d) * block;
  }
  return sum;
}

template <typename Block, float (*kDot)(const Block*, const BlockQ8_K*, int64_t)>
void dot4(const Block* w, const BlockQ8_K* const* x, int64_t n, float* out) {
  for (int t = 0; t < 4; t++) out[t] = kDot(w, x[t], n);
}

}  // namespace

const KQuantDots& scalar_kquant_dots() {
  static const KQuantDots k{"scalar",
                            dot_q4_K,
                            dot_q5_K,
                            dot_q6_K,
                            dot_fp8,
                            4,
                            dot4<BlockQ4_K, dot_q4_K>,
                            dot4<BlockQ5_K, dot_q5_K>,
                            dot4<BlockQ6_K, dot_q6_K>};
  return k;
}

#ifndef KESTREL_HAVE_AVX2_KERNELS
const KQuantDots* avx2_kquant_dots() { return nullptr; }
const KQuantDots* avx512vnni_kquant_dots() { return nullptr; }
#endif

const KQuantDots& kquant_dots_for(IsaLevel isa) {
  return best_table(isa, scalar_kquant_dots(), avx2_kquant_dots(), nullptr, avx512vnni_kquant_dots());
}

const KQuantDots& kquant_dots() {
  static const KQuantDots& k = kquant_dots_for(selected_isa());
  return k;
}

}  // namespace kestrel

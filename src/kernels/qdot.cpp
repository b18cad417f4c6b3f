// The scalar reference dots of qdot.h (sums in ggml's generic order:
// integer sums per block, then one float multiply-add per block), the
// activation quantizers and the table choice.
#include "kernels/isa_dispatch.h"
#include "kernels/qdot.h"

#include <cmath>

#include "formats/block_formats.h"
#include "formats/fp16.h"
#include "formats/iq_formats.h"
#include "formats/kquant_formats.h"
#include "formats/nonlinear4_formats.h"
#include "formats/q4q5_formats.h"
#include "hw/cpu_features.h"
#include "kernels/dot.h"
#include "kernels/kquant_dot.h"

namespace kestrel {
namespace {

// Integer dot of 32 levels with 32 activations.
template <typename Level>
int32_t idot32(Level level, const int8_t* x) {
  int32_t s = 0;
  for (int j = 0; j < 32; j++) s += level(j) * x[j];
  return s;
}

inline int nibble(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4; }

float dot_q4_1(const BlockQ4_1* w, const BlockQ8_1* x, int64_t n) {
  float sum = 0;
  for (int64_t i = 0; i < n / 32; i++) {
    const int32_t s = idot32([&](int j) { return nibble(w[i].qs, j); }, x[i].qs);
    sum += fp16_to_fp32(w[i].d) * fp16_to_fp32(x[i].d) * static_cast<float>(s) + fp16_to_fp32(w[i].m) * fp16_to_fp32(x[i].s);
  }
  return sum;
}

float dot_q5_1(const BlockQ5_1* w, const BlockQ8_1* x, int64_t n) {
  float sum = 0;
  for (int64_t i = 0; i < n / 32; i++) {
    const int32_t s = idot32([&](int j) { return q5_level(w[i].qs, w[i].qh, j); }, x[i].qs);
    sum += fp16_to_fp32(w[i].d) * fp16_to_fp32(x[i].d) * static_cast<float>(s) + fp16_to_fp32(w[i].m) * fp16_to_fp32(x[i].s);
  }
  return sum;
}

float dot_q5_0(const BlockQ5_0* w, const BlockQ8_0* x, int64_t n) {
  float sum = 0;
  for (int64_t i = 0; i < n / 32; i++) {
    const int32_t s = idot32([&](int j) { return q5_level(w[i].qs, w[i].qh, j) - 16; }, x[i].qs);
    sum += fp16_to_fp32(w[i].d) * fp16_to_fp32(x[i].d) * static_cast<float>(s);
  }
  return sum;
}

float dot_iq4_nl(const BlockIQ4_NL* w, const BlockQ8_0* x, int64_t n) {
  float sum = 0;
  for (int64_t i = 0; i < n / 32; i++) {
    const int32_t s = idot32([&](int j) { return static_cast<int>(kIq4nlValues[nibble(w[i].qs, j)]); }, x[i].qs);
    sum += fp16_to_fp32(x[i].d) * fp16_to_fp32(w[i].d) * static_cast<float>(s);
  }
  return sum;
}

float dot_mxfp4(const BlockMXFP4* w, const BlockQ8_0* x, int64_t n) {
  float sum = 0;
  for (int64_t i = 0; i < n / 32; i++) {
    const int32_t s = idot32([&](int j) { return static_cast<int>(kMxfp4Values[nibble(w[i].qs, j)]); }, x[i].qs);
    sum += fp16_to_fp32(x[i].d) * e8m0_to_fp32_half(w[i].e) * static_cast<float>(s);
  }
  return sum;
}

float dot_iq4_xs(const BlockIQ4_XS* w, const BlockQ8_K* x, int64_t n) {
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; i++) {
    const float d = fp16_to_fp32(w[i].d) * x[i].d;
    for (int j = 0; j < 8; j++) {
      const uint8_t* qs = w[i].qs + 16 * j;
      const int32_t s = idot32([&](int l) { return static_cast<int>(kIq4nlValues[nibble(qs, l)]); }, x[i].qs + 32 * j);
      sum += d * static_cast<float>(iq4xs_scale(w[i], j) - 32) * static_cast<float>(s);
    }
  }
  return sum;
}

// Q2_K and Q3_K: element 128h + 32j + l takes bits 2j of qs[32h + l] and
// sub-block 8h + 2j + l / 16.
float dot_q2_K(const BlockQ2_K* w, const BlockQ8_K* x, int64_t n) {
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; i++) {
    int32_t isum = 0, summs = 0;
    for (int j = 0; j < 16; j++) summs += x[i].bsums[j] * (w[i].scales[j] >> 4);
    for (int e = 0; e < kQK_K; e++) {
      const int h = e / 128, j = (e / 32) % 4, l = e % 32;
      isum += (w[i].scales[8 * h + 2 * j + l / 16] & 0xF) * ((w[i].qs[32 * h + l] >> (2 * j)) & 3) * x[i].qs[e];
    }
    sum += x[i].d * fp16_to_fp32(w[i].d) * static_cast<float>(isum) -
           x[i].d * fp16_to_fp32(w[i].dmin) * static_cast<float>(summs);
  }
  return sum;
}

float dot_q3_K(const BlockQ3_K* w, const BlockQ8_K* x, int64_t n) {
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; i++) {
    int8_t scales[16];
    unpack_scales_q3_K(w[i].scales, scales);
    int32_t isum = 0;
    for (int e = 0; e < kQK_K; e++) {
      const int h = e / 128, j = (e / 32) % 4, l = e % 32;
      const int q = ((w[i].qs[32 * h + l] >> (2 * j)) & 3) - ((w[i].hmask[l] >> (e / 32)) & 1 ? 0 : 4);
      isum += (scales[8 * h + 2 * j + l / 16] - 32) * q * x[i].qs[e];
    }
    sum += fp16_to_fp32(w[i].d) * x[i].d * static_cast<float>(isum);
  }
  return sum;
}

// IQ1-IQ3: ggml's generic order — an exact integer sum per block (levels
// times activations per 16, times the 16's scale), then one float
// fused multiply-add per block (ggml builds its C as gnu11 with FMA, so the
// compiler fuses it). The format's constant factor (1/8, 1/4) rides in
// the block scale, a power of two, so the rounding is ggml's.
template <typename Block, GgmlType kType>
float dot_iq(const Block* w, const BlockQ8_K* x, int64_t n) {
  IqLevels L;
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; i++) {
    iq_levels(kType, w, i, L);
    int32_t isum = 0;
    for (int k = 0; k < 16; k++) {
      int32_t s = 0;
      for (int j = 16 * k; j < 16 * k + 16; j++) s += L.q[j] * x[i].qs[j];
      isum += L.ls[k] * s;
    }
    sum = std::fma(L.d * x[i].d, static_cast<float>(isum), sum);  // fused, as ggml builds its C (gnu11, FMA)
  }
  return sum;
}

template <typename W, typename X, float (*kDot)(const W*, const X*, int64_t), int T>
void dots(const void* w, const void* const* x, int64_t n, float* out) {
  for (int t = 0; t < T; t++) out[t] = kDot(static_cast<const W*>(w), static_cast<const X*>(x[t]), n);
}

template <typename W, typename X, float (*kDot)(const W*, const X*, int64_t)>
constexpr QTypeDots entry(GgmlType type) {
  return {type, dots<W, X, kDot, 1>, dots<W, X, kDot, 4>};
}

constexpr QTypeDots kScalar[] = {
    entry<BlockQ4_1, BlockQ8_1, dot_q4_1>(GgmlType::Q4_1),
    entry<BlockQ5_0, BlockQ8_0, dot_q5_0>(GgmlType::Q5_0),
    entry<BlockQ5_1, BlockQ8_1, dot_q5_1>(GgmlType::Q5_1),
    entry<BlockIQ4_NL, BlockQ8_0, dot_iq4_nl>(GgmlType::IQ4_NL),
    entry<BlockMXFP4, BlockQ8_0, dot_mxfp4>(GgmlType::MXFP4),
    entry<BlockQ2_K, BlockQ8_K, dot_q2_K>(GgmlType::Q2_K),
    entry<BlockQ3_K, BlockQ8_K, dot_q3_K>(GgmlType::Q3_K),
    entry<BlockIQ4_XS, BlockQ8_K, dot_iq4_xs>(GgmlType::IQ4_XS),
    entry<BlockIQ2_XXS, BlockQ8_K, dot_iq<BlockIQ2_XXS, GgmlType::IQ2_XXS>>(GgmlType::IQ2_XXS),
    entry<BlockIQ2_XS, BlockQ8_K, dot_iq<BlockIQ2_XS, GgmlType::IQ2_XS>>(GgmlType::IQ2_XS),
    entry<BlockIQ2_S, BlockQ8_K, dot_iq<BlockIQ2_S, GgmlType::IQ2_S>>(GgmlType::IQ2_S),
    entry<BlockIQ3_XXS, BlockQ8_K, dot_iq<BlockIQ3_XXS, GgmlType::IQ3_XXS>>(GgmlType::IQ3_XXS),
    entry<BlockIQ3_S, BlockQ8_K, dot_iq<BlockIQ3_S, GgmlType::IQ3_S>>(GgmlType::IQ3_S),
    entry<BlockIQ1_S, BlockQ8_K, dot_iq<BlockIQ1_S, GgmlType::IQ1_S>>(GgmlType::IQ1_S),
    entry<BlockIQ1_M, BlockQ8_K, dot_iq<BlockIQ1_M, GgmlType::IQ1_M>>(GgmlType::IQ1_M),
};

}  // namespace

const QDotTable& scalar_qdots() {
  static const QDotTable t{"scalar", 4, kScalar};
  return t;
}

#ifndef KESTREL_HAVE_AVX2_KERNELS
const QDotTable* avx2_qdots() { return nullptr; }
const QDotTable* avx512vnni_qdots() { return nullptr; }
#endif

const QDotTable& qdots_for(IsaLevel isa) {
  return best_table(isa, scalar_qdots(), avx2_qdots(), nullptr, avx512vnni_qdots());
}

const QDotTable& qdots() {
  static const QDotTable& t = qdots_for(selected_isa());
  return t;
}

ActFormat activation_format(GgmlType weight) {
  if (traits(weight).block_size == kQK_K) return ActFormat::Q8_K;
  if (weight == GgmlType::Q4_1 || weight == GgmlType::Q5_1) return ActFormat::Q8_1;
  return ActFormat::Q8_0;
}

size_t activation_row_bytes(ActFormat f, int64_t n) {
  switch (f) {
    case ActFormat::Q8_0: return static_cast<size_t>(n / 32) * sizeof(BlockQ8_0);
    case ActFormat::Q8_1: return static_cast<size_t>(n / 32) * sizeof(BlockQ8_1);
    case ActFormat::Q8_K: return static_cast<size_t>(n / kQK_K) * sizeof(BlockQ8_K);
  }
  return 0;
}

void quantize_activations(ActFormat f, const float* x, void* out, int64_t n) {
  switch (f) {
    case ActFormat::Q8_0: dot_kernels().quantize_q8_0(x, static_cast<BlockQ8_0*>(out), n); return;
    case ActFormat::Q8_1: quantize_row_q8_1(x, static_cast<BlockQ8_1*>(out), n); return;
    case ActFormat::Q8_K: quantize_row_q8_K(x, static_cast<BlockQ8_K*>(out), n); return;
  }
}

const char* activation_format_name(ActFormat f) {
  switch (f) {
    case ActFormat::Q8_0: return "q8_0";
    case ActFormat::Q8_1: return "q8_1";
    case ActFormat::Q8_K: return "q8_K";
  }
  return "?";
}

}  // namespace kestrel

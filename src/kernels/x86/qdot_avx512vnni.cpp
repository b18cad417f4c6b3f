// The qdot.h table for AVX-512 VNNI; called only when the CPU has it: 64
// weights per vpdpbusd — two sub-blocks of a 256-wide block, or two
// 32-wide blocks (an odd last one through the 256-bit kernels of qdot_simd.h).
#include <immintrin.h>

#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "formats/block_formats.h"
#include "formats/iq_formats.h"
#include "formats/iq_grids.h"
#include "formats/kquant_formats.h"
#include "formats/nonlinear4_formats.h"
#include "formats/q4q5_formats.h"
#include "kernels/kquant_dot.h"
#include "kernels/qdot.h"
#include "kernels/x86/qdot_iq512.h"

#define KESTREL_QDOT_VNNI 1

namespace kestrel {
namespace {
#include "kernels/x86/qdot_simd.h"  // NOLINT(bugprone-suspicious-include): one ISA per TU

inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }

// Lanes 4k..4k+3 take scale B + k of the 16 in `scales` (a 64-element run is four sub-blocks of 16).
template <int B>
inline __m512i quad_scales(__m512i scales) {
  const __m512i idx = _mm512_setr_epi32(B, B, B, B, B + 1, B + 1, B + 1, B + 1, B + 2, B + 2, B + 2, B + 2, B + 3,
                                        B + 3, B + 3, B + 3);
  return _mm512_permutexvar_epi32(idx, scales);
}

// The 16 Q3_K scales (value - 32) as int32 lanes, from the 12 packed bytes
// with 32-bit operations (no byte loop: its scattered stores would stall the loads after them).
inline __m512i q3_K_scales(const uint8_t* packed) {
  uint32_t a[3];
  std::memcpy(a, packed, 12);
  constexpr uint32_t k2 = 0x03030303, k4 = 0x0f0f0f0f;
  const uint32_t s0 = (a[0] & k4) | (((a[2] >> 0) & k2) << 4), s1 = (a[1] & k4) | (((a[2] >> 2) & k2) << 4);
  const uint32_t s2 = ((a[0] >> 4) & k4) | (((a[2] >> 4) & k2) << 4), s3 = ((a[1] >> 4) & k4) | (((a[2] >> 6) & k2) << 4);
  const __m128i bytes = _mm_setr_epi32(static_cast<int>(s0), static_cast<int>(s1), static_cast<int>(s2), static_cast<int>(s3));
  return _mm512_sub_epi32(_mm512_cvtepu8_epi32(bytes), _mm512_set1_epi32(32));
}

// Two 256-bit halves as one 512-bit vector.
inline __m512i join(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }

// Levels of sub-blocks (J, J + 1) of a Q2_K/Q3_K half: bits 2J of q in the
// low 256 bits, 2J + 2 in the high (shift counts are immediates: J and H are
// template arguments), plus Q3_K's third bit from hm's bits 4H + J and 4H + J + 1.
template <bool kThree, int H, int J>
inline __m512i q23_levels(__m256i q, __m256i hm) {
  const __m512i three = _mm512_set1_epi8(3);
  __m512i level = _mm512_and_si512(join(_mm256_srli_epi16(q, 2 * J), _mm256_srli_epi16(q, 2 * J + 2)), three);
  if constexpr (kThree) {
    const __m512i one = _mm512_set1_epi8(1);
    const __m512i bit = join(_mm256_srli_epi16(hm, 4 * H + J), _mm256_srli_epi16(hm, 4 * H + J + 1));
    level = _mm512_or_si512(level, _mm512_slli_epi16(_mm512_and_si512(bit, one), 2));
  }
  return level;
}

// Q2_K / Q3_K, 64 weights per step: sub-blocks (j, j + 1) of half h.
template <bool kThree, typename Block, int T, int H, int J>
inline void q23_step(const Block& b, __m512i sc, const void* const* xv, int64_t i, __m512i* sumi) {
  __m256i hm = _mm256_setzero_si256();
  if constexpr (kThree) hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.hmask));
  const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * H));
  const __m512i level = q23_levels<kThree, H, J>(q, hm);
  const __m512i scale = quad_scales<8 * H + 2 * J>(sc);
  for (int t = 0; t < T; t++) {
    const BlockQ8_K& x = static_cast<const BlockQ8_K*>(xv[t])[i];
    const __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), level, load512(x.qs + 128 * H + 32 * J));
    sumi[t] = _mm512_add_epi32(sumi[t], _mm512_mullo_epi32(d, scale));
  }
}

template <bool kThree, typename Block, int T>
void dot_q23_K_512(const void* wv, const void* const* xv, int64_t n, float* out) {
  const auto* w = static_cast<const Block*>(wv);
  __m512 acc[T];
  float mins[T];
  for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps(), mins[t] = 0;
  for (int64_t i = 0; i < n / kQK_K; i++) {
    // Scales (and Q2_K's minimums, Q3_K's offset of 4 per scale) as int32 lanes.
    __m512i sc, mn;
    if constexpr (kThree) {
      sc = q3_K_scales(w[i].scales);
      mn = _mm512_slli_epi32(sc, 2);
    } else {
      const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[i].scales)));
      sc = _mm512_and_si512(b, _mm512_set1_epi32(0xF));
      mn = _mm512_srli_epi32(b, 4);
    }
    __m512i sumi[T];
    for (int t = 0; t < T; t++) sumi[t] = _mm512_setzero_si512();
    q23_step<kThree, Block, T, 0, 0>(w[i], sc, xv, i, sumi);
    q23_step<kThree, Block, T, 0, 2>(w[i], sc, xv, i, sumi);
    q23_step<kThree, Block, T, 1, 0>(w[i], sc, xv, i, sumi);
    q23_step<kThree, Block, T, 1, 2>(w[i], sc, xv, i, sumi);
    const float wd = _cvtsh_ss(w[i].d);
    for (int t = 0; t < T; t++) {
      const BlockQ8_K& x = static_cast<const BlockQ8_K*>(xv[t])[i];
      const __m512i bsums = _mm512_cvtepi16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums)));
      const int summ = _mm512_reduce_add_epi32(_mm512_mullo_epi32(mn, bsums));
      acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(x.d * wd), _mm512_cvtepi32_ps(sumi[t]), acc[t]);
      if constexpr (kThree) mins[t] += x.d * wd * static_cast<float>(summ);
      else mins[t] += x.d * _cvtsh_ss(w[i].dmin) * static_cast<float>(summ);
    }
  }
  for (int t = 0; t < T; t++) out[t] = _mm512_reduce_add_ps(acc[t]) - mins[t];
}

// IQ4_XS, two blocks of 32 per step: the table shifted to unsigned (value +
// 128) so vpdpbusd takes it directly; the shift comes back through the
// activations' sums of 16.
template <int T>
void dot_iq4_xs_512(const void* wv, const void* const* xv, int64_t n, float* out) {
  const auto* w = static_cast<const BlockIQ4_XS*>(wv);
  int8_t shifted[16];
  for (int k = 0; k < 16; k++) shifted[k] = static_cast<int8_t>(kIq4nlValues[k] + 128);
  const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(shifted)));
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  __m512 acc[T];
  float corr[T];
  for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps(), corr[t] = 0;
  for (int64_t i = 0; i < n / kQK_K; i++) {
    int ls[8];
    for (int j = 0; j < 8; j++) ls[j] = iq4xs_scale(w[i], j) - 32;
    __m512i sumi[T];
    for (int t = 0; t < T; t++) sumi[t] = _mm512_setzero_si512();
    for (int j = 0; j < 8; j += 2) {
      // [low nibbles of block j, high of j, low of j + 1, high of j + 1]: elements in order.
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i].qs + 16 * j));
      const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1);
      const __m512i idx = _mm512_and_si512(_mm512_shuffle_i64x2(both, both, _MM_SHUFFLE(3, 1, 2, 0)), low4);
      const __m512i level = _mm512_shuffle_epi8(table, idx);
      const __m512i scale = _mm512_inserti64x4(_mm512_set1_epi32(ls[j]), _mm256_set1_epi32(ls[j + 1]), 1);
      for (int t = 0; t < T; t++) {
        const BlockQ8_K& x = static_cast<const BlockQ8_K*>(xv[t])[i];
        const __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), level, load512(x.qs + 32 * j));
        sumi[t] = _mm512_add_epi32(sumi[t], _mm512_mullo_epi32(d, scale));
      }
    }
    const float wd = _cvtsh_ss(w[i].d);
    for (int t = 0; t < T; t++) {
      const BlockQ8_K& x = static_cast<const BlockQ8_K*>(xv[t])[i];
      int shift = 0;
      for (int j = 0; j < 8; j++) shift += ls[j] * (x.bsums[2 * j] + x.bsums[2 * j + 1]);
      acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(x.d * wd), _mm512_cvtepi32_ps(sumi[t]), acc[t]);
      corr[t] += x.d * wd * static_cast<float>(128 * shift);
    }
  }
  for (int t = 0; t < T; t++) out[t] = _mm512_reduce_add_ps(acc[t]) - corr[t];
}

// --- Q5_0 / Q5_1, two blocks per 512-bit vector ---------------------------
// The fifth bits of both blocks come from one mask register: ~20% faster per
// core than the 256-bit kernel. (For Q4_1, IQ4_NL and MXFP4 the per-block
// scale work dominates and the 256-bit kernels measured as fast: they keep them.)
// Block A's 32 weights in lanes 0-7 (bytes 0-31), block B's in lanes 8-15.
// Q5_0's offset of 16 comes back through a second vpdpbusd of 16 against the
// activations; Q5_1's minimum through Q8_1's block sums.

// [low nibbles of a, high of a, low of b, high of b]: both blocks' 4-bit levels in element order.
inline __m512i nibbles_pair(const uint8_t* a, const uint8_t* b) {
  const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
                                            _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1);
  const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1);
  return _mm512_and_si512(_mm512_shuffle_i64x2(both, both, _MM_SHUFFLE(3, 1, 2, 0)), _mm512_set1_epi8(0x0F));
}

template <typename Block>
inline __m512i q5_levels_pair(const Block& a, const Block& b) {
  uint32_t ha, hb;
  std::memcpy(&ha, a.qh, 4);
  std::memcpy(&hb, b.qh, 4);
  const __mmask64 fifth = _cvtu64_mask64(ha | (static_cast<uint64_t>(hb) << 32));
  return _mm512_or_si512(nibbles_pair(a.qs, b.qs), _mm512_maskz_mov_epi8(fifth, _mm512_set1_epi8(0x10)));
}

// kMin: Q5_1 (x = d q + m, activations Q8_1); else Q5_0 (x = d (q - 16), activations Q8_0).
template <bool kMin, typename Block, typename Act, int T>
void dot_q5_pair(const void* wv, const void* const* xv, int64_t n, float* out) {
  const auto* w = static_cast<const Block*>(wv);
  const __m512i sixteen = _mm512_set1_epi8(16);
  __m512 acc[T];
  float mins[T];
  for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps(), mins[t] = 0;
  const int64_t nb = n / 32;
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    const __m512i level = q5_levels_pair(w[i], w[i + 1]);
    const float da = _cvtsh_ss(w[i].d), db = _cvtsh_ss(w[i + 1].d);
    for (int t = 0; t < T; t++) {
      const Act* x = static_cast<const Act*>(xv[t]) + i;
      const __m512i xa = _mm512_inserti64x4(_mm512_castsi256_si512(load256(x[0].qs)), load256(x[1].qs), 1);
      __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), level, xa);
      if constexpr (!kMin) d = _mm512_sub_epi32(d, _mm512_dpbusd_epi32(_mm512_setzero_si512(), sixteen, xa));
      const __m512 scale = _mm512_insertf32x8(_mm512_set1_ps(da * _cvtsh_ss(x[0].d)), _mm256_set1_ps(db * _cvtsh_ss(x[1].d)), 1);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), scale, acc[t]);
      if constexpr (kMin) mins[t] += _cvtsh_ss(w[i].m) * _cvtsh_ss(x[0].s) + _cvtsh_ss(w[i + 1].m) * _cvtsh_ss(x[1].s);
    }
  }
  float tail[T] = {};
  if (i < nb) {  // an odd last block: the 256-bit kernel's arithmetic for one block
    const void* xs[T];
    for (int t = 0; t < T; t++) xs[t] = static_cast<const Act*>(xv[t]) + i;
    if constexpr (kMin) dot_q4q5_1<true, Block, T>(w + i, xs, 32, tail);
    else dot_signed32<Signed32::Q5_0, Block, T>(w + i, xs, 32, tail);
  }
  for (int t = 0; t < T; t++) out[t] = _mm512_reduce_add_ps(acc[t]) + mins[t] + tail[t];
}

constexpr int kTokens = 4;

constexpr auto entries() {
  auto e = simd_qdot_entries<kTokens>();
  for (auto& d : e) {
    switch (d.type) {  // the IQ1-IQ3 types: 64 weights per step (qdot_iq_avx512vnni.cpp)
#define KESTREL_IQ512(t) \
  case GgmlType::t: d.one = iq512::dot<GgmlType::t, 1>, d.many = iq512::dot<GgmlType::t, kTokens>; break;
      KESTREL_IQ512(IQ2_XXS) KESTREL_IQ512(IQ2_XS) KESTREL_IQ512(IQ2_S) KESTREL_IQ512(IQ3_XXS) KESTREL_IQ512(IQ3_S)
      KESTREL_IQ512(IQ1_S) KESTREL_IQ512(IQ1_M)
#undef KESTREL_IQ512
      default: break;
    }
    if (d.type == GgmlType::Q2_K) d.one = dot_q23_K_512<false, BlockQ2_K, 1>, d.many = dot_q23_K_512<false, BlockQ2_K, kTokens>;
    if (d.type == GgmlType::Q3_K) d.one = dot_q23_K_512<true, BlockQ3_K, 1>, d.many = dot_q23_K_512<true, BlockQ3_K, kTokens>;
    if (d.type == GgmlType::IQ4_XS) d.one = dot_iq4_xs_512<1>, d.many = dot_iq4_xs_512<kTokens>;
    if (d.type == GgmlType::Q5_1)
      d.one = dot_q5_pair<true, BlockQ5_1, BlockQ8_1, 1>, d.many = dot_q5_pair<true, BlockQ5_1, BlockQ8_1, kTokens>;
    if (d.type == GgmlType::Q5_0)
      d.one = dot_q5_pair<false, BlockQ5_0, BlockQ8_0, 1>, d.many = dot_q5_pair<false, BlockQ5_0, BlockQ8_0, kTokens>;
  }
  return e;
}
constexpr auto kDots = entries();
}  // namespace

const QDotTable* avx512vnni_qdots() {
  static const QDotTable t{"avx512 vnni", kTokens, kDots};
  return &t;
}

}  // namespace kestrel

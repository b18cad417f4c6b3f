// The IQ1-IQ3 row dots of qdot_iq512.h: AVX-512 VNNI, 64 weights per step.
//
// Per step (two 32-weight sub-blocks of a 256-weight block):
//   magnitudes: the lattice entries of the step's 8 groups (IQ3: 16 groups
//     of 4) in one gather, as unsigned bytes;
//   signs: a 64-bit mask of the weights that are negative — stored bits, or
//     7-bit fields spread to bytes with their parity bit added — which
//     negates those activations (IQ1: the levels in eighths, 8·g ± 1,
//     split into magnitude and sign the same way);
//   one vpdpbusd, then each 16-weight lane group times its integer scale.
// The block's integer sum is exact, then one fused multiply-add per block
// as in the scalar reference: equal results, bit for bit (tested).
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "formats/block_formats.h"
#include "formats/iq_formats.h"
#include "formats/iq_grids.h"
#include "kernels/kquant_dot.h"
#include "kernels/x86/qdot_iq512.h"

namespace kestrel::iq512 {
namespace {

struct Step {
  __m512i mag;     // unsigned magnitudes of the 64 weights
  __mmask64 neg;   // weights that are negative
  __m512i scale;   // int32 lanes: lanes 4k..4k+3 hold weights 16k..16k+15, times this
};

inline uint32_t word(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t qword(const void* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// Four 7-bit sign fields (bits 0-27) as four bytes, each with its parity bit 7
// (an even count of negatives per group of 8, as the format stores it).
inline uint64_t signs7x4(uint32_t aux) {
  const uint64_t b = (aux & 0x7F) | ((aux & (0x7Fu << 7)) << 1) | ((aux & (0x7Fu << 14)) << 2) |
                     (static_cast<uint64_t>(aux & (0x7Fu << 21)) << 3);
  return b;
}
inline uint64_t with_parity(uint64_t b) {  // per byte of 7 bits: bit 7 = their parity
  uint64_t p = b ^ (b >> 4);
  p ^= p >> 2;
  p ^= p >> 1;
  return b | ((p & 0x0101010101010101ULL) << 7);
}

// Lanes 4k..4k+3 take s[k].
inline __m512i scales16(int a, int b, int c, int d) {
  const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  return _mm512_permutexvar_epi32(idx, _mm512_castsi128_si512(_mm_setr_epi32(a, b, c, d)));
}

inline __m512i gather8(__m512i idx, const uint64_t* grid) {
  return _mm512_i64gather_epi64(idx, reinterpret_cast<const long long*>(grid), 8);
}
inline __m512i gather16(__m512i idx, const uint32_t* grid) {
  return _mm512_i32gather_epi32(idx, reinterpret_cast<const int*>(grid), 4);
}
inline __m512i bytes_to_q(uint64_t eight_bytes) { return _mm512_cvtepu8_epi64(_mm_cvtsi64_si128(static_cast<long long>(eight_bytes))); }

// IQ1: levels in eighths, 8·g + shift, split into magnitude and sign.
inline void eighths(__m512i grid, __m512i shift, Step& s) {
  const __m512i g8 = _mm512_and_si512(_mm512_slli_epi16(grid, 3), _mm512_set1_epi8(static_cast<char>(0xF8)));
  const __m512i level = _mm512_add_epi8(g8, shift);
  s.mag = _mm512_abs_epi8(level);
  s.neg = _mm512_movepi8_mask(level);
}

inline Step step(const BlockIQ2_XXS& b, int p) {  // p: sub-blocks 2p, 2p + 1
  const auto* q = reinterpret_cast<const uint8_t*>(b.qs) + 16 * p;
  const uint32_t aux0 = word(q + 4), aux1 = word(q + 12);
  const uint64_t idx = word(q) | (static_cast<uint64_t>(word(q + 8)) << 32);
  const int l0 = static_cast<int>(2 * (aux0 >> 28) + 1), l1 = static_cast<int>(2 * (aux1 >> 28) + 1);
  return {gather8(bytes_to_q(idx), kIq2xxsGrid), with_parity(signs7x4(aux0) | (signs7x4(aux1) << 32)),
          scales16(l0, l0, l1, l1)};
}

inline Step step(const BlockIQ2_XS& b, int p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs + 8 * p));
  const __m512i idx = _mm512_and_si512(_mm512_cvtepu16_epi64(v), _mm512_set1_epi64(511));
  const __m128i fields = _mm_packus_epi16(_mm_srli_epi16(v, 9), _mm_setzero_si128());
  const uint8_t s0 = b.scales[2 * p], s1 = b.scales[2 * p + 1];
  return {gather8(idx, kIq2xsGrid), with_parity(static_cast<uint64_t>(_mm_cvtsi128_si64(fields))),
          scales16(2 * (s0 & 15) + 1, 2 * (s0 >> 4) + 1, 2 * (s1 & 15) + 1, 2 * (s1 >> 4) + 1)};
}

inline Step step(const BlockIQ2_S& b, int p) {
  uint16_t qh;
  std::memcpy(&qh, b.qh + 2 * p, 2);
  const __m512i high = _mm512_and_si512(
      _mm512_srlv_epi64(_mm512_set1_epi64(qh), _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14)), _mm512_set1_epi64(3));
  const __m512i idx = _mm512_or_si512(bytes_to_q(qword(b.qs + 8 * p)), _mm512_slli_epi64(high, 8));
  const uint8_t s0 = b.scales[2 * p], s1 = b.scales[2 * p + 1];
  return {gather8(idx, kIq2sGrid), qword(b.qs + 32 + 8 * p),
          scales16(2 * (s0 & 15) + 1, 2 * (s0 >> 4) + 1, 2 * (s1 & 15) + 1, 2 * (s1 >> 4) + 1)};
}

inline Step step(const BlockIQ3_XXS& b, int p) {
  const __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs + 16 * p)));
  const uint32_t aux0 = word(b.qs + 64 + 8 * p), aux1 = word(b.qs + 68 + 8 * p);
  const int l0 = static_cast<int>(2 * (aux0 >> 28) + 1), l1 = static_cast<int>(2 * (aux1 >> 28) + 1);
  return {gather16(idx, kIq3xxsGrid), with_parity(signs7x4(aux0) | (signs7x4(aux1) << 32)), scales16(l0, l0, l1, l1)};
}

inline Step step(const BlockIQ3_S& b, int p) {
  uint16_t qh;
  std::memcpy(&qh, b.qh + 2 * p, 2);
  const __m512i high = _mm512_and_si512(
      _mm512_srlv_epi32(_mm512_set1_epi32(qh), _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)),
      _mm512_set1_epi32(1));
  const __m512i idx = _mm512_or_si512(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs + 16 * p))),
                                      _mm512_slli_epi32(high, 8));
  const int l0 = 2 * (b.scales[p] & 15) + 1, l1 = 2 * (b.scales[p] >> 4) + 1;
  return {gather16(idx, kIq3sGrid), qword(b.signs + 8 * p), scales16(l0, l0, l1, l1)};
}

inline Step step(const BlockIQ1_S& b, int p) {
  const uint32_t h0 = b.qh[2 * p], h1 = b.qh[2 * p + 1];
  const __m512i h = _mm512_mask_blend_epi64(0xF0, _mm512_set1_epi64(h0), _mm512_set1_epi64(h1));
  const __m512i high = _mm512_and_si512(_mm512_srlv_epi64(h, _mm512_setr_epi64(0, 3, 6, 9, 0, 3, 6, 9)), _mm512_set1_epi64(7));
  const __m512i idx = _mm512_or_si512(bytes_to_q(qword(b.qs + 8 * p)), _mm512_slli_epi64(high, 8));
  // The shift: +1 or -1 in every byte of each 32 (all-ones where bit 15 is set, OR 1).
  const auto ones = [](uint32_t hw) { return -static_cast<long long>(hw >> 15); };
  const __m512i shift = _mm512_or_si512(
      _mm512_mask_blend_epi64(0xF0, _mm512_set1_epi64(ones(h0)), _mm512_set1_epi64(ones(h1))), _mm512_set1_epi8(1));
  const int l0 = static_cast<int>(2 * ((h0 >> 12) & 7) + 1), l1 = static_cast<int>(2 * ((h1 >> 12) & 7) + 1);
  Step s{};
  eighths(gather8(idx, kIq1sGrid), shift, s);
  s.scale = scales16(l0, l0, l1, l1);
  return s;
}

inline Step step(const BlockIQ1_M& b, int p, uint16_t scale_word) {
  const uint32_t qh = word(b.qh + 4 * p);  // 8 nibbles: 3 high index bits and the shift sign of each group
  const __m512i nib = _mm512_srlv_epi64(_mm512_set1_epi64(qh), _mm512_setr_epi64(0, 4, 8, 12, 16, 20, 24, 28));
  const __m512i idx = _mm512_or_si512(bytes_to_q(qword(b.qs + 8 * p)),
                                      _mm512_slli_epi64(_mm512_and_si512(nib, _mm512_set1_epi64(7)), 8));
  const __mmask8 minus = _mm512_test_epi64_mask(nib, _mm512_set1_epi64(8));
  const __m512i shift = _mm512_mask_blend_epi64(minus, _mm512_set1_epi8(1), _mm512_set1_epi8(-1));
  const int s = scale_word;  // sub-blocks 2p (bits 0-5) and 2p + 1 (bits 6-11), 3 bits per 16
  Step st{};
  eighths(gather8(idx, kIq1sGrid), shift, st);
  st.scale = scales16(2 * (s & 7) + 1, 2 * ((s >> 3) & 7) + 1, 2 * ((s >> 6) & 7) + 1, 2 * ((s >> 9) & 7) + 1);
  return st;
}

template <GgmlType> struct BlockOf;
template <> struct BlockOf<GgmlType::IQ2_XXS> { using type = BlockIQ2_XXS; };
template <> struct BlockOf<GgmlType::IQ2_XS> { using type = BlockIQ2_XS; };
template <> struct BlockOf<GgmlType::IQ2_S> { using type = BlockIQ2_S; };
template <> struct BlockOf<GgmlType::IQ3_XXS> { using type = BlockIQ3_XXS; };
template <> struct BlockOf<GgmlType::IQ3_S> { using type = BlockIQ3_S; };
template <> struct BlockOf<GgmlType::IQ1_S> { using type = BlockIQ1_S; };
template <> struct BlockOf<GgmlType::IQ1_M> { using type = BlockIQ1_M; };

}  // namespace

template <GgmlType kType, int T>
void dot(const void* wv, const void* const* xv, int64_t n, float* out) {
  using Block = typename BlockOf<kType>::type;
  const auto* w = static_cast<const Block*>(wv);
  float sum[T] = {};
  for (int64_t i = 0; i < n / kQK_K; i++) {
    __m512i acc[T];
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_si512();
    uint16_t words[4] = {};
    if constexpr (kType == GgmlType::IQ1_M) std::memcpy(words, w[i].scales, 8);
    for (int p = 0; p < 4; p++) {
      Step s;
      if constexpr (kType == GgmlType::IQ1_M) s = step(w[i], p, words[p]);
      else s = step(w[i], p);
      for (int t = 0; t < T; t++) {
        const __m512i x = _mm512_loadu_si512(static_cast<const BlockQ8_K*>(xv[t])[i].qs + 64 * p);
        const __m512i xs = _mm512_mask_sub_epi8(x, s.neg, _mm512_setzero_si512(), x);
        const __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), s.mag, xs);
        acc[t] = _mm512_add_epi32(acc[t], _mm512_mullo_epi32(d, s.scale));
      }
    }
    const float dw = iq_block_scale(w[i]);
    for (int t = 0; t < T; t++)
      sum[t] = std::fma(dw * static_cast<const BlockQ8_K*>(xv[t])[i].d, static_cast<float>(_mm512_reduce_add_epi32(acc[t])),
                        sum[t]);
  }
  for (int t = 0; t < T; t++) out[t] = sum[t];
}

#define KESTREL_IQ512(type)                                                                \
  template void dot<GgmlType::type, 1>(const void*, const void* const*, int64_t, float*); \
  template void dot<GgmlType::type, 4>(const void*, const void* const*, int64_t, float*);
KESTREL_IQ512(IQ2_XXS)
KESTREL_IQ512(IQ2_XS)
KESTREL_IQ512(IQ2_S)
KESTREL_IQ512(IQ3_XXS)
KESTREL_IQ512(IQ3_S)
KESTREL_IQ512(IQ1_S)
KESTREL_IQ512(IQ1_M)
#undef KESTREL_IQ512

}  // namespace kestrel::iq512

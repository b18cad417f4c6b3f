#pragma once
// Small AVX-512 building blocks shared by the quantized kernels. Include only
// from translation units compiled with AVX-512 F/BW/VL/DQ (and F16C).
//
// The float side keeps ggml's arithmetic: eight int32 lanes per block, scaled
// by d_w*d_x and accumulated with FMA block after block in 8 lanes, summed
// across lanes at the end, so results are bit-identical to llama.cpp.
#include <immintrin.h>

#include <cstdint>

#include "formats/block_formats.h"

namespace kestrel::avx512 {

inline float f16(uint16_t h) { return _cvtsh_ss(h); }

// ggml's hsum_float_8 order.
inline float hsum8(__m256 v) {
  __m128 r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

// 32 bytes from lo in the low half, 32 from hi in the high half.
inline __m512i load_two(const int8_t* lo, const int8_t* hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo))),
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hi)), 1);
}

// One Q4_0 block's 16 packed bytes as 32 unsigned nibbles in element order.
inline __m256i q4_nibbles(const uint8_t* qs) {
  const __m128i p = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(p), _mm_srli_epi16(p, 4), 1),
                          _mm256_set1_epi8(0x0F));
}

// Two Q4_0 blocks' packed bytes as 64 unsigned nibbles: [a lo, a hi, b lo, b hi].
// [qs_a | qs_b] -> 128-bit lanes [qs_a, qs_a, qs_b, qs_b]; odd lanes shift right by 4.
inline __m512i q4_nibbles_two(const uint8_t* qs_a, const uint8_t* qs_b) {
  const __m256i ab = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs_a))),
                                             _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs_b)), 1);
  const __m512i z = _mm512_castsi256_si512(ab);
  const __m512i dup = _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(1, 1, 0, 0));
  const __m512i shifts = _mm512_setr_epi64(0, 0, 0x0004000400040004ll, 0x0004000400040004ll, 0, 0,
                                            0x0004000400040004ll, 0x0004000400040004ll);
  return _mm512_and_si512(_mm512_srlv_epi16(dup, shifts), _mm512_set1_epi8(0x0F));
}

// Two blocks' int32 lanes (block b low, b+1 high) scaled and accumulated in order.
inline __m256 accumulate_two(__m256 acc, __m512i sums, float d0, float d1) {
  const __m512 f = _mm512_cvtepi32_ps(sums);
  acc = _mm256_fmadd_ps(_mm256_set1_ps(d0), _mm512_castps512_ps256(f), acc);
  return _mm256_fmadd_ps(_mm256_set1_ps(d1), _mm512_extractf32x8_ps(f, 1), acc);
}

// One block of signed weights and activations in 256 bits (the odd block out).
inline __m256 accumulate_one(__m256 acc, __m256i qw, __m256i qx, float d) {
  const __m256i ax = _mm256_sign_epi8(qw, qw), sy = _mm256_sign_epi8(qx, qw);
  const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1));
  return _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s), acc);
}

// A Q8_0 or Q4_0 row dot in ggml's order. pair_lanes(w + b, x + b) gives the
// int32 lanes of blocks b and b+1 (the ISA-specific part); the odd last block
// goes through the 256-bit path with the weights as signed bytes.
template <typename Block, typename PairLanes>
inline float row_dot(const Block* w, const BlockQ8_0* x, int64_t n, PairLanes pair_lanes) {
  const int64_t nb = n / kQK8_0;
  __m256 acc = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2)
    acc = accumulate_two(acc, pair_lanes(w + b, x + b), f16(w[b].d) * f16(x[b].d), f16(w[b + 1].d) * f16(x[b + 1].d));
  if (b < nb) {
    __m256i qw;
    if constexpr (sizeof(Block) == sizeof(BlockQ8_0)) qw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs));
    else qw = _mm256_sub_epi8(q4_nibbles(w[b].qs), _mm256_set1_epi8(8));
    acc = accumulate_one(acc, qw, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs)), f16(w[b].d) * f16(x[b].d));
  }
  return hsum8(acc);
}

}  // namespace kestrel::avx512

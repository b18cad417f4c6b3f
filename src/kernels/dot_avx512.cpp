// AVX-512 (F + BW + VL) versions of the dot kernels: 16 floats or two
// quantized blocks per instruction. Compiled with those flags alone; only
// called when the CPU reports them.
#include <immintrin.h>

#include "core/fp16.h"
#include "kernels/dot.h"

namespace kestrel {
namespace {

inline float f16(uint16_t h) { return _cvtsh_ss(h); }

inline __mmask16 tail_mask(int64_t n) { return static_cast<__mmask16>((1u << n) - 1u); }

float dot_f32(const float* w, const float* x, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 16), _mm512_loadu_ps(x + i + 16), a1);
  }
  for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), a0);
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w + i), _mm512_maskz_loadu_ps(m, x + i), a1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

float dot_f16_f32(const uint16_t* w, const float* x, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i))),
                         _mm512_loadu_ps(x + i), a0);
    a1 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i + 16))),
                         _mm512_loadu_ps(x + i + 16), a1);
  }
  for (; i + 16 <= n; i += 16)
    a0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i))),
                         _mm512_loadu_ps(x + i), a0);
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    a1 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, w + i)), _mm512_maskz_loadu_ps(m, x + i), a1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

float dot_bf16_f32(const uint16_t* w, const float* x, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xFFFF) : tail_mask(n - i);
    const __m512i wi = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, w + i));
    acc = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(wi, 16)), _mm512_maskz_loadu_ps(m, x + i), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

// Signed int8 dot of 64 lanes (two blocks) as 16 int32 sums, 8 per block.
inline __m512i dot_i8_pairs(__m512i a, __m512i b) {
  const __m512i ax = _mm512_abs_epi8(a);
  const __m512i sy = _mm512_mask_sub_epi8(b, _mm512_movepi8_mask(a), _mm512_setzero_si512(), b);
  return _mm512_madd_epi16(_mm512_maddubs_epi16(ax, sy), _mm512_set1_epi16(1));
}

inline __m512i load_two(const int8_t* lo, const int8_t* hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo))),
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hi)), 1);
}

inline __m256i q4_unpack(const uint8_t* qs) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(packed), _mm_srli_epi16(packed, 4), 1);
  return _mm256_sub_epi8(_mm256_and_si256(both, _mm256_set1_epi8(0x0F)), _mm256_set1_epi8(8));
}

// Integer work for two blocks at a time in 512 bits; the float accumulation
// stays 8 lanes wide, one block after another, which is exactly ggml's order
// (so logits match llama.cpp bit for bit, as on the AVX2 path).
inline __m256 accumulate_two(__m256 acc, __m512i sums, float d0, float d1) {
  const __m512 f = _mm512_cvtepi32_ps(sums);
  acc = _mm256_fmadd_ps(_mm256_set1_ps(d0), _mm512_castps512_ps256(f), acc);
  return _mm256_fmadd_ps(_mm256_set1_ps(d1), _mm512_extractf32x8_ps(f, 1), acc);
}

inline float hsum8(__m256 v) {
  __m128 r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

// One block in 256 bits (the odd block out).
inline __m256 accumulate_one(__m256 acc, __m256i qw, __m256i qx, float d) {
  const __m256i ax = _mm256_sign_epi8(qw, qw), sy = _mm256_sign_epi8(qx, qw);
  const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1));
  return _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s), acc);
}

float dot_q8_0_q8_0(const BlockQ8_0* w, const BlockQ8_0* x, int64_t n) {
  const int64_t nb = n / kQK8_0;
  __m256 acc = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const __m512i s = dot_i8_pairs(load_two(w[b].qs, w[b + 1].qs), load_two(x[b].qs, x[b + 1].qs));
    acc = accumulate_two(acc, s, f16(w[b].d) * f16(x[b].d), f16(w[b + 1].d) * f16(x[b + 1].d));
  }
  if (b < nb)
    acc = accumulate_one(acc, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs)),
                         _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs)), f16(w[b].d) * f16(x[b].d));
  return hsum8(acc);
}

float dot_q4_0_q8_0(const BlockQ4_0* w, const BlockQ8_0* x, int64_t n) {
  const int64_t nb = n / kQK4_0;
  __m256 acc = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const __m512i qw = _mm512_inserti64x4(_mm512_castsi256_si512(q4_unpack(w[b].qs)), q4_unpack(w[b + 1].qs), 1);
    const __m512i s = dot_i8_pairs(qw, load_two(x[b].qs, x[b + 1].qs));
    acc = accumulate_two(acc, s, f16(w[b].d) * f16(x[b].d), f16(w[b + 1].d) * f16(x[b + 1].d));
  }
  if (b < nb)
    acc = accumulate_one(acc, q4_unpack(w[b].qs), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs)),
                         f16(w[b].d) * f16(x[b].d));
  return hsum8(acc);
}

}  // namespace

const DotKernels* avx512_dot_kernels() {
  const DotKernels* avx2 = avx2_dot_kernels();
  // The activation quantizer is memory-light; the AVX2 one serves here too.
  static const DotKernels k{IsaLevel::Avx512, dot_f32, dot_f16_f32, dot_bf16_f32,
                            dot_q8_0_q8_0, dot_q4_0_q8_0, avx2->quantize_q8_0, avx2->axpy_f32, avx2->exp_sum_f32};
  return &k;
}

}  // namespace kestrel

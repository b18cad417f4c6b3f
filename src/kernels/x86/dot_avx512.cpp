// AVX-512 (F + BW + VL) versions of the dot kernels: 16 floats or two
// quantized blocks per instruction. Compiled with those flags alone; only
// called when the CPU reports them.
#include <immintrin.h>

#include "formats/fp16.h"
#include "kernels/x86/avx512_helpers.h"
#include "kernels/dot.h"

namespace kestrel {
namespace {

using namespace avx512;

inline __mmask16 tail_mask(int64_t n) { return static_cast<__mmask16>((1u << n) - 1u); }

// ggml's AVX-512 f32 and f16 row dots (ggml_vec_dot_f32/_f16 without AVX512-FP16): four accumulators over
// 64-element steps, GGML_F32x16_REDUCE ((x0 + x2) + (x1 + x3), then _mm512_reduce_add_ps), the leftovers one
// at a time (f32: in float; f16: in double, its ggml_float sum).
inline float ggml_reduce4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a2), _mm512_add_ps(a1, a3)));
}

float dot_f32(const float* w, const float* x, int64_t n) {
  __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  int64_t i = 0;
  for (; i + 64 <= n; i += 64)
    for (int j = 0; j < 4; j++) a[j] = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 16 * j), _mm512_loadu_ps(x + i + 16 * j), a[j]);
  float sum = ggml_reduce4(a[0], a[1], a[2], a[3]);
  for (; i < n; i++) sum += w[i] * x[i];
  return sum;
}

float dot_f16_f32(const uint16_t* w, const float* x, int64_t n) {
  __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  int64_t i = 0;
  for (; i + 64 <= n; i += 64)
    for (int j = 0; j < 4; j++)
      a[j] = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i + 16 * j))),
                             _mm512_loadu_ps(x + i + 16 * j), a[j]);
  double sum = ggml_reduce4(a[0], a[1], a[2], a[3]);
  for (; i < n; i++) sum += static_cast<double>(fp16_to_fp32(w[i]) * x[i]);
  return static_cast<float>(sum);
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

// One Q4_0 block as 32 signed values (nibble - 8).
inline __m256i q4_unpack(const uint8_t* qs) { return _mm256_sub_epi8(q4_nibbles(qs), _mm256_set1_epi8(8)); }

float dot_q8_0_q8_0(const BlockQ8_0* w, const BlockQ8_0* x, int64_t n) {
  return row_dot(w, x, n, [](const BlockQ8_0* w2, const BlockQ8_0* x2) {
    return dot_i8_pairs(load_two(w2[0].qs, w2[1].qs), load_two(x2[0].qs, x2[1].qs));
  });
}

float dot_q4_0_q8_0(const BlockQ4_0* w, const BlockQ8_0* x, int64_t n) {
  return row_dot(w, x, n, [](const BlockQ4_0* w2, const BlockQ8_0* x2) {
    const __m512i qw = _mm512_inserti64x4(_mm512_castsi256_si512(q4_unpack(w2[0].qs)), q4_unpack(w2[1].qs), 1);
    return dot_i8_pairs(qw, load_two(x2[0].qs, x2[1].qs));
  });
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

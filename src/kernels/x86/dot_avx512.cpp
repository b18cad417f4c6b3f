// AVX-512 (F + BW + VL) versions of the dot kernels: 16 floats or two
// quantized blocks per instruction. Compiled with those flags alone; only
// called when the CPU reports them.
#include <immintrin.h>

#include <algorithm>

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

// dot_f16_f32 of rows shorter than 64 (its tail loop only: each product in float, the sum in double from 0, in
// column order), 8 rows at a time: 8 columns of the 8 rows' products widened to double, transposed so that a
// vector holds one column of the 8 rows, added column after column.
void dot_f16_short_rows(const uint16_t* w, int64_t stride, int64_t rows, const float* x, int64_t n, float* y) {
  for (int64_t r = 0; r < rows; r += 8) {
    const int64_t m = std::min<int64_t>(8, rows - r);
    __m512d s = _mm512_setzero_pd();
    for (int64_t i = 0; i < n; i += 8) {
      const int64_t c = std::min<int64_t>(8, n - i);
      const __mmask8 cm = static_cast<__mmask8>((1u << c) - 1u);
      const __m256 xv = _mm256_maskz_loadu_ps(cm, x + i);
      __m512d p[8];
      for (int j = 0; j < 8; j++) {
        const __m128i h = j < m ? _mm_maskz_loadu_epi16(cm, w + (r + j) * stride + i) : _mm_setzero_si128();
        p[j] = _mm512_cvtps_pd(_mm256_mul_ps(_mm256_cvtph_ps(h), xv));
      }
      __m512d t[8], u[8];
      for (int j = 0; j < 8; j += 2) {
        t[j] = _mm512_unpacklo_pd(p[j], p[j + 1]);
        t[j + 1] = _mm512_unpackhi_pd(p[j], p[j + 1]);
      }
      u[0] = _mm512_shuffle_f64x2(t[0], t[2], 0x88);
      u[1] = _mm512_shuffle_f64x2(t[1], t[3], 0x88);
      u[2] = _mm512_shuffle_f64x2(t[0], t[2], 0xdd);
      u[3] = _mm512_shuffle_f64x2(t[1], t[3], 0xdd);
      u[4] = _mm512_shuffle_f64x2(t[4], t[6], 0x88);
      u[5] = _mm512_shuffle_f64x2(t[5], t[7], 0x88);
      u[6] = _mm512_shuffle_f64x2(t[4], t[6], 0xdd);
      u[7] = _mm512_shuffle_f64x2(t[5], t[7], 0xdd);
      const __m512d col[8] = {_mm512_shuffle_f64x2(u[0], u[4], 0x88), _mm512_shuffle_f64x2(u[1], u[5], 0x88),
                              _mm512_shuffle_f64x2(u[2], u[6], 0x88), _mm512_shuffle_f64x2(u[3], u[7], 0x88),
                              _mm512_shuffle_f64x2(u[0], u[4], 0xdd), _mm512_shuffle_f64x2(u[1], u[5], 0xdd),
                              _mm512_shuffle_f64x2(u[2], u[6], 0xdd), _mm512_shuffle_f64x2(u[3], u[7], 0xdd)};
      for (int64_t k = 0; k < c; k++) s = _mm512_add_pd(s, col[k]);
    }
    const __m256 out = _mm512_cvtpd_ps(s);
    _mm256_mask_storeu_ps(y + r, static_cast<__mmask8>((1u << m) - 1u), out);
  }
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
                            dot_q8_0_q8_0, dot_q4_0_q8_0, avx2->quantize_q8_0, avx2->axpy_f32, avx2->exp_sum_f32, 64,
                            dot_f16_short_rows};
  return &k;
}

}  // namespace kestrel

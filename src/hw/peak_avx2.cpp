#include <immintrin.h>

#include "hw/peak_kernels.h"

namespace kestrel::peak {

float f32_fma_avx2(int64_t iterations) {
  __m256 a[12];
  for (int i = 0; i < 12; i++) a[i] = _mm256_set1_ps(0.001f * static_cast<float>(i));
  const __m256 m = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(0.0001f);
  for (int64_t it = 0; it < iterations; it++)
    for (int i = 0; i < 12; i++) a[i] = _mm256_fmadd_ps(a[i], m, c);
  __m256 s = a[0];
  for (int i = 1; i < 12; i++) s = _mm256_add_ps(s, a[i]);
  return _mm256_cvtss_f32(s);
}

// vpmaddubsw, the AVX2 int8 multiply (32 products a register). Each accumulator
// feeds its own next multiply (its int16 sums read as the next unsigned bytes),
// so no product can be hoisted out of the loop: a constant pair of operands,
// as this loop once had, let the compiler compute the products once and left
// only the vpaddd adds to time (a "peak" of 1242 GOP/s on 2 Zen 4 cores).
// Twelve chains cover the instruction's latency (3-5 cycles) at two a cycle.
int32_t int8_dot_avx2(int64_t iterations) {
  __m256i a[12];
  for (int i = 0; i < 12; i++) a[i] = _mm256_set1_epi32(0x01020304 + i);
  const __m256i s8 = _mm256_set1_epi8(-3);
  for (int64_t it = 0; it < iterations; it++)
    for (int i = 0; i < 12; i++) a[i] = _mm256_maddubs_epi16(a[i], s8);
  __m256i s = a[0];
  for (int i = 1; i < 12; i++) s = _mm256_add_epi32(s, a[i]);
  return _mm256_extract_epi32(s, 0);
}

float sum_floats(const float* p, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p + i + 24));
  }
  const __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  float total = 0;
  for (float v : lanes) total += v;
  for (; i < n; i++) total += p[i];
  return total;
}

}  // namespace kestrel::peak

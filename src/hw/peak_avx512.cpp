// Compiled with AVX-512 F/BW/VL/VNNI/BF16; each function is only called when
// the CPU reports the features it uses.
#include <immintrin.h>

#include "hw/peak_kernels.h"

namespace kestrel::peak {

float f32_fma_avx512(int64_t iterations) {
  __m512 a[12];
  for (int i = 0; i < 12; i++) a[i] = _mm512_set1_ps(0.001f * static_cast<float>(i));
  const __m512 m = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(0.0001f);
  for (int64_t it = 0; it < iterations; it++)
    for (int i = 0; i < 12; i++) a[i] = _mm512_fmadd_ps(a[i], m, c);
  __m512 s = a[0];
  for (int i = 1; i < 12; i++) s = _mm512_add_ps(s, a[i]);
  return _mm512_reduce_add_ps(s);
}

int32_t int8_dot_vnni512(int64_t iterations) {
  __m512i a[12];
  for (int i = 0; i < 12; i++) a[i] = _mm512_set1_epi32(i);
  const __m512i u = _mm512_set1_epi8(3), s8 = _mm512_set1_epi8(-2);
  for (int64_t it = 0; it < iterations; it++)
    for (int i = 0; i < 12; i++) a[i] = _mm512_dpbusd_epi32(a[i], u, s8);
  __m512i s = a[0];
  for (int i = 1; i < 12; i++) s = _mm512_add_epi32(s, a[i]);
  // The lanes wrap after billions of iterations (only their use matters):
  // summed as unsigned, where wrapping is defined (GCC's
  // _mm512_reduce_add_epi32 adds them as int: UBSan's signed overflow).
  alignas(64) uint32_t lanes[16];
  _mm512_store_si512(lanes, s);
  uint32_t sum = 0;
  for (uint32_t v : lanes) sum += v;
  return static_cast<int32_t>(sum);
}

float bf16_dot_avx512(int64_t iterations) {
  __m512 a[12];
  for (int i = 0; i < 12; i++) a[i] = _mm512_set1_ps(0.001f * static_cast<float>(i));
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3F80), y = (__m512bh)_mm512_set1_epi16(0x3A83);
  for (int64_t it = 0; it < iterations; it++)
    for (int i = 0; i < 12; i++) a[i] = _mm512_dpbf16_ps(a[i], x, y);
  __m512 s = a[0];
  for (int i = 1; i < 12; i++) s = _mm512_add_ps(s, a[i]);
  return _mm512_reduce_add_ps(s);
}

}  // namespace kestrel::peak

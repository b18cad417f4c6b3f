// AVX2 + F16C readers of the KV-cache row formats (kv_format.h), bit-identical
// to the scalar ones: the same products, sums and butterfly order, no FMA.
#include <immintrin.h>

#include <cmath>

#include "formats/fp16.h"
#include "kernels/x86/fp8_f16c.h"
#include "kernels/kv_format.h"

namespace kestrel {
namespace {

inline float load_f16(const uint8_t* p) {
  uint16_t h;
  __builtin_memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// The in-register butterflies of one 8-float vector (strides 1, 2, 4): lane i
// takes x[i] + x[i ^ h] where bit h of i is clear, x[i ^ h] - x[i] where set.
inline __m256 butterflies8(__m256 x) {
  __m256 b = _mm256_permute_ps(x, 0xB1);
  x = _mm256_blend_ps(_mm256_add_ps(x, b), _mm256_sub_ps(b, x), 0xAA);
  b = _mm256_permute_ps(x, 0x4E);
  x = _mm256_blend_ps(_mm256_add_ps(x, b), _mm256_sub_ps(b, x), 0xCC);
  b = _mm256_permute2f128_ps(x, x, 1);
  return _mm256_blend_ps(_mm256_add_ps(x, b), _mm256_sub_ps(b, x), 0xF0);
}

// Orthonormal Walsh-Hadamard transform of g (8, 16 or 32) floats in place, in
// the scalar version's stage order (strides 1, 2, 4 in registers, then 8, 16).
inline void hadamard(float* y, int g) {
  __m256 v[4];
  const int nv = g / 8;
  for (int k = 0; k < nv; k++) v[k] = butterflies8(_mm256_loadu_ps(y + 8 * k));
  for (int h = 1; h < nv; h *= 2)
    for (int k = 0; k < nv; k += 2 * h)
      for (int j = k; j < k + h; j++) {
        const __m256 a = v[j], b = v[j + h];
        v[j] = _mm256_add_ps(a, b);
        v[j + h] = _mm256_sub_ps(a, b);
      }
  const __m256 norm = _mm256_set1_ps(1.0f / std::sqrt(static_cast<float>(g)));
  for (int k = 0; k < nv; k++) _mm256_storeu_ps(y + 8 * k, _mm256_mul_ps(v[k], norm));
}

void dequant_f16(const uint8_t* in, float* y, int64_t n, int, size_t) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i))));
  for (; i < n; i++) y[i] = load_f16(in + 2 * i);
}

void dequant_bf16(const uint8_t* in, float* y, int64_t n, int, size_t) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i)));
    _mm256_storeu_ps(y + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
  }
  for (; i < n; i++) {
    uint16_t h;
    __builtin_memcpy(&h, in + 2 * i, 2);
    y[i] = bf16_to_fp32(h);
  }
}

template <typename Convert>
void dequant_groups(const uint8_t* in, float* y, int64_t n, int g, size_t gb, KvDequantFn fallback, Convert convert8,
                    bool rotate) {
  if (g < 8) return fallback(in, y, n, g, gb);  // heads smaller than 8: the scalar reader
  for (int64_t b = 0; b < n / g; b++, y += g, in += gb) {
    for (int i = 0; i < g; i += 8) _mm256_storeu_ps(y + i, convert8(in, i));
    if (rotate) hadamard(y, g);
  }
}

void dequant_q8_0(const uint8_t* in, float* y, int64_t n, int g, size_t gb) {
  dequant_groups(
      in, y, n, g, gb, scalar_kv_dequant().q8_0,
      [](const uint8_t* grp, int i) {
        const __m256 d = _mm256_set1_ps(load_f16(grp));
        const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(grp + 2 + i)));
        return _mm256_mul_ps(d, _mm256_cvtepi32_ps(q));
      },
      true);
}

void dequant_fp8(const uint8_t* in, float* y, int64_t n, int g, size_t gb) {
  dequant_groups(
      in, y, n, g, gb, scalar_kv_dequant().fp8,
      [](const uint8_t* grp, int i) {
        return _mm256_mul_ps(_mm256_set1_ps(256.0f * load_f16(grp)), e4m3x8_div256(grp + 2 + i));
      },
      false);
}

void dequant_q4(const uint8_t* in, float* y, int64_t n, int g, size_t gb) {
  dequant_groups(
      in, y, n, g, gb, scalar_kv_dequant().q4,
      [](const uint8_t* grp, int i) {
        // Elements i..i+7: bytes i/2 .. i/2+3, low nibble first.
        uint32_t four;
        __builtin_memcpy(&four, grp + 4 + i / 2, 4);
        const __m128i b = _mm_cvtsi32_si128(static_cast<int>(four));
        const __m128i lo = _mm_and_si128(b, _mm_set1_epi8(0x0F));
        const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0x0F));
        const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi)));
        return _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(load_f16(grp)), q), _mm256_set1_ps(load_f16(grp + 2)));
      },
      true);
}

}  // namespace

const KvDequantKernels* avx2_kv_dequant() {
  static const KvDequantKernels k{"avx2", dequant_f16, dequant_bf16, dequant_q8_0, dequant_fp8, dequant_q4};
  return &k;
}

}  // namespace kestrel

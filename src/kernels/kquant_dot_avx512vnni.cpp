// AVX-512 VNNI (256-bit vpdpbusd) k-quant dots and 512-bit FP8 dots (kquant_dot_simd.h); called only when the CPU has
// them.
#include <immintrin.h>

#include "kernels/fp8_f16c.h"
#include "kernels/kquant_dot.h"

namespace kestrel {
namespace {
#define KESTREL_KQ_VNNI 1
#include "kernels/kquant_dot_simd.h"  // NOLINT(bugprone-suspicious-include): one ISA per TU

// 16 E4M3 bytes to 16 floats / 256 (as in e4m3x8_div256, 512 bits wide).
inline __m512 e4m3x16_div256(const uint8_t* q) {
  const __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
  const __m256i h = _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x7F)), 7),
                                    _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x80)), 8));
  return _mm512_cvtph_ps(h);
}

float dot_fp8(const BlockFp8* w, const float* x, int64_t n) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  for (int64_t i = 0; i < n / kQKFp8; i++, x += kQKFp8) {
    const __m512 d = _mm512_set1_ps(256.0f * _cvtsh_ss(w[i].d));
    acc0 = _mm512_fmadd_ps(_mm512_mul_ps(e4m3x16_div256(w[i].qs), d), _mm512_loadu_ps(x), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_mul_ps(e4m3x16_div256(w[i].qs + 16), d), _mm512_loadu_ps(x + 16), acc1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

}  // namespace

const KQuantDots* avx512vnni_kquant_dots() {
  static const KQuantDots k{"avx512 vnni", dot_q4_K, dot_q5_K, dot_q6_K, dot_fp8, dot4_q4_K, dot4_q5_K, dot4_q6_K};
  return &k;
}

}  // namespace kestrel

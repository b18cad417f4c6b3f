// AVX2 + FMA + F16C k-quant and FP8 dots (kquant_dot_simd.h); called only when the CPU has them.
#include <immintrin.h>

#include "kernels/x86/fp8_f16c.h"
#include "kernels/kquant_dot.h"

namespace kestrel {
namespace {
#include "kernels/x86/kquant_dot_simd.h"  // NOLINT(bugprone-suspicious-include): one ISA per TU

float dot_fp8(const BlockFp8* w, const float* x, int64_t n) { return simd_dot_fp8(w, x, n); }

int32_t hsum_i32(__m256i v) {
  const __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  const __m128i t = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  return _mm_cvtsi128_si32(_mm_add_epi32(t, _mm_shuffle_epi32(t, 1)));
}

}  // namespace

// quantize_row_q8_K_scalar's result (llama.cpp's quantize_row_q8_K_ref), 32 values a step.
void quantize_row_q8_K_avx2(const float* x, BlockQ8_K* y, int64_t n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t i = 0; i < n / kQK_K; i++, x += kQK_K) {
    __m256 amax = _mm256_setzero_ps();
    for (int j = 0; j < kQK_K; j += 8) amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    const float m = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
    if (m == 0) {
      y[i] = {};
      continue;
    }
    // The first element of that magnitude gives the sign, as the scalar loop's strict > keeps it.
    float max = 0;
    for (int j = 0; j < kQK_K; j += 8) {
      const int hit = _mm256_movemask_ps(
          _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), _mm256_set1_ps(m), _CMP_EQ_OQ));
      if (hit) {
        max = x[j + __builtin_ctz(static_cast<unsigned>(hit))];
        break;
      }
    }
    const float iscale = -127.0f / max;
    const __m256 s = _mm256_set1_ps(iscale);
    for (int j = 0; j < kQK_K; j += 32) {
      __m256i q[4];
      for (int k = 0; k < 4; k++) {
        const __m256 v = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + j + 8 * k), s),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q[k] = _mm256_min_epi32(_mm256_cvtps_epi32(v), _mm256_set1_epi32(127));
      }
      // packs work within 128-bit lanes: the permute puts the 32 bytes back in order.
      const __m256i bytes = _mm256_permutevar8x32_epi32(
          _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3])),
          _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs + j), bytes);
      y[i].bsums[j / 16] = static_cast<int16_t>(hsum_i32(_mm256_add_epi32(q[0], q[1])));
      y[i].bsums[j / 16 + 1] = static_cast<int16_t>(hsum_i32(_mm256_add_epi32(q[2], q[3])));
    }
    y[i].d = 1 / iscale;
  }
}

const KQuantDots* avx2_kquant_dots() {
  // One token, and four (prefill).
  static const KQuantDots k{"avx2",
                            one_token<BlockQ4_K, simd_dot_k4<false, 1, BlockQ4_K>>,
                            one_token<BlockQ5_K, simd_dot_k4<true, 1, BlockQ5_K>>,
                            one_token<BlockQ6_K, simd_dot_q6_K<1>>,
                            dot_fp8,
                            4,
                            simd_dot_k4<false, 4, BlockQ4_K>,
                            simd_dot_k4<true, 4, BlockQ5_K>,
                            simd_dot_q6_K<4>};
  return &k;
}

}  // namespace kestrel

// Small AVX2 building blocks shared by the AVX2 files whose results must agree
// bit for bit (the BF16 row dot of dot_avx2.cpp and the BF16 batches of
// gemm_float_avx2.cpp that keep its order). Included inside each file's
// anonymous namespace (one ISA per translation unit: no inline function is
// shared across files compiled with different flags); needs AVX2 + F16C.

// The horizontal sum of 8 floats: (lo + hi) halves, then pairs, then the last two.
inline float hsum(__m256 v) {
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

// 8 BF16 values widened to f32 (exact: a shift into the high half).
inline __m256 widen_bf16(const uint16_t* p) {
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}

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

// ggml's GGML_F32x8_REDUCE of four accumulators (its f32 and f16 row dots on AVX2): (x0 + x2) + (x1 + x3),
// the 128-bit halves added, then two horizontal adds ((v0 + v1) + (v2 + v3): not hsum's order).
inline float ggml_reduce4(__m256 x0, __m256 x1, __m256 x2, __m256 x3) {
  const __m256 x = _mm256_add_ps(_mm256_add_ps(x0, x2), _mm256_add_ps(x1, x3));
  const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  const __m128 t1 = _mm_hadd_ps(t0, t0);
  return _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
}

// 8 BF16 values widened to f32 (exact: a shift into the high half).
inline __m256 widen_bf16(const uint16_t* p) {
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}

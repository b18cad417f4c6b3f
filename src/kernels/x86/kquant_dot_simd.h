#pragma once
// The k-quant and FP8 row dots in 256-bit vectors for the AVX2 build (the
// AVX-512 table has its own 512-bit ones); dot32: 32 unsigned weight levels
// times 32 signed activations, summed in groups of four into 8 int32 lanes.
// Included by one translation unit, inside an anonymous namespace, after
// <immintrin.h>, kernels/kquant_dot.h and kernels/x86/fp8_f16c.h.

inline __m256i dot32(__m256i acc, __m256i u8, __m256i s8) {
  // Levels are at most 63 and activations at least -127: pairs stay within int16.
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u8, s8), _mm256_set1_epi16(1)));
}

inline float hsum_ps(__m256 v) {
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

// T tokens against one row: each block's weight levels are unpacked once
// and dotted with every token's activations (prefill reuses the unpacking).
template <bool kFive, int T, typename Block>
void simd_dot_k4(const Block* w, const BlockQ8_K* const* xs, int64_t n, float* out) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  __m256 acc[T];
  float mins[T];
  for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps(), mins[t] = 0;
  for (int64_t i = 0; i < n / kQK_K; i++) {
    int sc[8], m[8];
    for (int j = 0; j < 8; j++) unpack_scale_min_k4(w[i].scales, j, sc[j], m[j]);
    __m256i sumi[T];
    for (int t = 0; t < T; t++) sumi[t] = _mm256_setzero_si256();
    __m256i qh;
    if constexpr (kFive) qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i].qh));
    for (int c = 0; c < 4; c++) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i].qs + 32 * c));
      __m256i lo = _mm256_and_si256(q, low4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
      if constexpr (kFive) {
        // Bit 2c of qh is sub-block 2c's fifth bit, bit 2c + 1 sub-block 2c + 1's.
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one), 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one), 4));
      }
      const __m256i sc_lo = _mm256_set1_epi32(sc[2 * c]), sc_hi = _mm256_set1_epi32(sc[2 * c + 1]);
      for (int t = 0; t < T; t++) {
        const int8_t* a = xs[t][i].qs + 64 * c;
        const __m256i d_lo = dot32(_mm256_setzero_si256(), lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a)));
        const __m256i d_hi =
            dot32(_mm256_setzero_si256(), hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 32)));
        sumi[t] = _mm256_add_epi32(sumi[t],
                                   _mm256_add_epi32(_mm256_mullo_epi32(d_lo, sc_lo), _mm256_mullo_epi32(d_hi, sc_hi)));
      }
    }
    const float wd = _cvtsh_ss(w[i].d), wmin = _cvtsh_ss(w[i].dmin);
    for (int t = 0; t < T; t++) {
      const BlockQ8_K& x = xs[t][i];
      int summ = 0;
      for (int j = 0; j < 8; j++) summ += m[j] * (x.bsums[2 * j] + x.bsums[2 * j + 1]);
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[t]), _mm256_set1_ps(x.d * wd), acc[t]);
      mins[t] += x.d * wmin * static_cast<float>(summ);
    }
  }
  for (int t = 0; t < T; t++) out[t] = hsum_ps(acc[t]) - mins[t];
}

template <int T>
void simd_dot_q6_K(const BlockQ6_K* w, const BlockQ8_K* const* xs, int64_t n, float* out) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), three = _mm256_set1_epi8(3);
  __m256 acc[T];
  for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK_K; i++) {
    __m256i sumi[T];
    for (int t = 0; t < T; t++) sumi[t] = _mm256_setzero_si256();
    for (int h = 0; h < 2; h++) {
      const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i].ql + 64 * h));
      const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i].ql + 64 * h + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i].qh + 32 * h));
      const __m256i lows[4] = {_mm256_and_si256(ql0, low4), _mm256_and_si256(ql1, low4),
                               _mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                               _mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4)};
      for (int q = 0; q < 4; q++) {
        const __m256i high = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * q), three), 4);
        const __m256i level = _mm256_or_si256(lows[q], high);
        // Lanes 0-3 sum elements 0-15 (one scale), lanes 4-7 elements 16-31 (the next).
        const int is = 8 * h + 2 * q;
        const int s0 = w[i].scales[is], s1 = w[i].scales[is + 1];
        const __m256i scale = _mm256_setr_epi32(s0, s0, s0, s0, s1, s1, s1, s1);
        for (int t = 0; t < T; t++) {
          const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs[t][i].qs + 128 * h + 32 * q));
          sumi[t] = _mm256_add_epi32(sumi[t], _mm256_mullo_epi32(dot32(_mm256_setzero_si256(), level, a), scale));
        }
      }
    }
    const float wd = _cvtsh_ss(w[i].d);
    for (int t = 0; t < T; t++) {
      // The levels carry an offset of 32: subtract 32 * scale * (sum of the activations) per sub-block.
      int offset = 0;
      for (int j = 0; j < 16; j++) offset += w[i].scales[j] * xs[t][i].bsums[j];
      const __m256i s = _mm256_sub_epi32(sumi[t], _mm256_setr_epi32(32 * offset, 0, 0, 0, 0, 0, 0, 0));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(xs[t][i].d * wd), acc[t]);
    }
  }
  for (int t = 0; t < T; t++) out[t] = hsum_ps(acc[t]);
}

inline float simd_dot_fp8(const BlockFp8* w, const float* x, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKFp8; i++, x += kQKFp8) {
    __m256 block = _mm256_mul_ps(e4m3x8_div256(w[i].qs), _mm256_loadu_ps(x));
    for (int j = 8; j < kQKFp8; j += 8)
      block = _mm256_fmadd_ps(e4m3x8_div256(w[i].qs + j), _mm256_loadu_ps(x + j), block);
    acc = _mm256_fmadd_ps(block, _mm256_set1_ps(256.0f * _cvtsh_ss(w[i].d)), acc);
  }
  return hsum_ps(acc);
}

// The float tiles (gemm_float.h) for AVX2 + FMA + F16C: 4 weight rows x 3
// tokens per micro-kernel (12 accumulators, 3 activation vectors and a weight
// vector fill the 16 ymm registers), 12 FMAs per 7 loads, one horizontal sum
// per output; F16 rows widened by F16C, BF16 rows by a shift.
#include <immintrin.h>

#include <algorithm>

#include "formats/fp16.h"
#include "kernels/gemm_float.h"

namespace kestrel {
namespace {

constexpr int kRows = 4, kTokens = 3;

template <GgmlType W>
inline __m256 load_w(const uint8_t* row, int64_t k) {
  if constexpr (W == GgmlType::F32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k);
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(row) + k));
    if constexpr (W == GgmlType::F16) return _mm256_cvtph_ps(h);
    else return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

template <GgmlType W>
inline float scalar_w(const uint8_t* row, int64_t k) {
  if constexpr (W == GgmlType::F32) return reinterpret_cast<const float*>(row)[k];
  else if constexpr (W == GgmlType::F16) return fp16_to_fp32(reinterpret_cast<const uint16_t*>(row)[k]);
  else return bf16_to_fp32(reinterpret_cast<const uint16_t*>(row)[k]);
}

inline float hsum(__m256 v) {
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

template <GgmlType W, int R, int T>
void tile(const uint8_t* const* rows, int64_t cols, const float* const* xs, float* y, int64_t ldy, int64_t r, int64_t t0) {
  __m256 acc[R][T];
  for (int i = 0; i < R; i++)
    for (int t = 0; t < T; t++) acc[i][t] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= cols; k += 8) {
    __m256 xv[T];
    for (int t = 0; t < T; t++) xv[t] = _mm256_loadu_ps(xs[t] + k);
    for (int i = 0; i < R; i++) {
      const __m256 wv = load_w<W>(rows[i], k);
      for (int t = 0; t < T; t++) acc[i][t] = _mm256_fmadd_ps(wv, xv[t], acc[i][t]);
    }
  }
  for (int i = 0; i < R; i++)
    for (int t = 0; t < T; t++) {
      float s = hsum(acc[i][t]);
      for (int64_t j = k; j < cols; j++) s += scalar_w<W>(rows[i], j) * xs[t][j];
      y[(t0 + t) * ldy + r + i] = s;
    }
}

template <GgmlType W, int R>
void rows_all_tokens(const uint8_t* const* rows, int64_t cols, const float* x, int64_t n, float* y, int64_t ldy, int64_t r) {
  const float* xs[kTokens];
  int64_t t = 0;
  for (; t + kTokens <= n; t += kTokens) {
    for (int i = 0; i < kTokens; i++) xs[i] = x + (t + i) * cols;
    tile<W, R, kTokens>(rows, cols, xs, y, ldy, r, t);
  }
  const int rest = static_cast<int>(n - t);
  for (int i = 0; i < rest; i++) xs[i] = x + (t + i) * cols;
  if (rest == 2) tile<W, R, 2>(rows, cols, xs, y, ldy, r, t);
  if (rest == 1) tile<W, R, 1>(rows, cols, xs, y, ldy, r, t);
}

template <GgmlType W>
void gemm(const uint8_t* w, size_t stride, int64_t cols, int64_t r0, int64_t r1, const float* x, int64_t n, float* y,
          int64_t ldy, int64_t token_chunk) {
  // Activations of a chunk of tokens stay in L2 while the rows stream past.
  for (int64_t tc = 0; tc < n; tc += token_chunk) {
    const int64_t tn = std::min(token_chunk, n - tc);
    const float* xc = x + tc * cols;
    float* yc = y + tc * ldy;
    int64_t r = r0;
    for (; r + kRows <= r1; r += kRows) {
      const uint8_t* rows[kRows];
      for (int i = 0; i < kRows; i++) rows[i] = w + (r + i) * stride;
      rows_all_tokens<W, kRows>(rows, cols, xc, tn, yc, ldy, r);
    }
    for (; r < r1; r++) {
      const uint8_t* rows[1] = {w + r * stride};
      rows_all_tokens<W, 1>(rows, cols, xc, tn, yc, ldy, r);
    }
  }
}

void gemm_float_avx2(GgmlType wtype, const uint8_t* w, size_t row_stride, int64_t cols, int64_t r0, int64_t r1,
                     const float* x, int64_t n, float* y, int64_t ldy, int64_t token_chunk) {
  token_chunk = std::max<int64_t>(1, token_chunk);
  switch (wtype) {
    case GgmlType::F32: gemm<GgmlType::F32>(w, row_stride, cols, r0, r1, x, n, y, ldy, token_chunk); break;
    case GgmlType::F16: gemm<GgmlType::F16>(w, row_stride, cols, r0, r1, x, n, y, ldy, token_chunk); break;
    default: gemm<GgmlType::BF16>(w, row_stride, cols, r0, r1, x, n, y, ldy, token_chunk); break;
  }
}

}  // namespace

const FloatTiles& avx2_float_tiles() {
  static const FloatTiles t{"avx2", gemm_float_avx2};
  return t;
}

}  // namespace kestrel

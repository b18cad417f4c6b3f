// The float tiles (gemm_float.h) for AVX2 + FMA + F16C: 4 weight rows x 3
// tokens per micro-kernel (12 accumulators, 3 activation vectors and a weight
// vector fill the 16 ymm registers), 12 FMAs per 7 loads, one horizontal sum
// per output; F16 rows widened by F16C, BF16 rows by a shift. Where the
// columns are a multiple of 8 each output is summed as llama.cpp's GEMM for
// batches sums it on AVX2 (llamafile's tinyBLAS<8, __m256>: the same shape,
// steps and horizontal sum).
#include <immintrin.h>

#include <algorithm>

#include "formats/fp16.h"
#include "kernels/gemm_float.h"

namespace kestrel {
namespace {
#include "kernels/x86/avx2_helpers.h"  // NOLINT(bugprone-suspicious-include): one ISA per TU

constexpr int kRows = 4, kTokens = 3;

template <GgmlType W>
inline __m256 load_w(const uint8_t* row, int64_t k) {
  const auto* halves = reinterpret_cast<const uint16_t*>(row) + k;
  if constexpr (W == GgmlType::F32) return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k);
  else if constexpr (W == GgmlType::F16) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(halves)));
  else return widen_bf16(halves);
}

template <GgmlType W>
inline float scalar_w(const uint8_t* row, int64_t k) {
  if constexpr (W == GgmlType::F32) return reinterpret_cast<const float*>(row)[k];
  else if constexpr (W == GgmlType::F16) return fp16_to_fp32(reinterpret_cast<const uint16_t*>(row)[k]);
  else return bf16_to_fp32(reinterpret_cast<const uint16_t*>(row)[k]);
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

// Rows x T tokens in dot_avx2.cpp's dot_bf16_f32 order: per (row, token) four accumulators over 32-element
// steps, then 8-element steps into the first, (c1 + c3) + (c2 + c4), the same horizontal sum, a scalar tail.
// The 32-element steps run in column chunks whose activations and weights stay in L1, a row block at a time,
// the accumulators kept in memory between chunks (the same FMAs in the same order: bit-identical).
constexpr int64_t kBf16RowBlock = 8, kBf16ColChunk = 512;

template <int T>
void bf16_rows_tokens(const uint8_t* w, size_t stride, int64_t cols, int64_t r0, int64_t r1, const float* const* xs,
                      float* y, int64_t ldy, int64_t t0) {
  alignas(32) float acc[kBf16RowBlock][T][4][8];
  const int64_t cols32 = cols / 32 * 32;
  for (int64_t rb = r0; rb < r1; rb += kBf16RowBlock) {
    const int64_t nr = std::min(kBf16RowBlock, r1 - rb);
    std::fill_n(&acc[0][0][0][0], sizeof acc / sizeof(float), 0.0f);
    for (int64_t c0 = 0; c0 < cols32; c0 += kBf16ColChunk) {
      const int64_t c1 = std::min(cols32, c0 + kBf16ColChunk);
      for (int64_t r = 0; r < nr; r++) {
        const auto* wr = reinterpret_cast<const uint16_t*>(w + (rb + r) * stride);
        __m256 c[T][4];
        for (int t = 0; t < T; t++)
          for (int j = 0; j < 4; j++) c[t][j] = _mm256_load_ps(acc[r][t][j]);
        for (int64_t i = c0; i < c1; i += 32)
          for (int j = 0; j < 4; j++) {
            const __m256 wv = widen_bf16(wr + i + 8 * j);
            for (int t = 0; t < T; t++) c[t][j] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(xs[t] + i + 8 * j), c[t][j]);
          }
        for (int t = 0; t < T; t++)
          for (int j = 0; j < 4; j++) _mm256_store_ps(acc[r][t][j], c[t][j]);
      }
    }
    for (int64_t r = 0; r < nr; r++) {
      const auto* wr = reinterpret_cast<const uint16_t*>(w + (rb + r) * stride);
      for (int t = 0; t < T; t++) {
        __m256 c[4];
        for (int j = 0; j < 4; j++) c[j] = _mm256_load_ps(acc[r][t][j]);
        int64_t i = cols32;
        for (; i + 8 <= cols; i += 8) c[0] = _mm256_fmadd_ps(widen_bf16(wr + i), _mm256_loadu_ps(xs[t] + i), c[0]);
        float sum = hsum(_mm256_add_ps(_mm256_add_ps(c[0], c[2]), _mm256_add_ps(c[1], c[3])));
        for (; i < cols; i++) sum += bf16_to_fp32(wr[i]) * xs[t][i];
        y[(t0 + t) * ldy + rb + r] = sum;
      }
    }
  }
}

void bf16_in_dot_order(const uint8_t* w, size_t stride, int64_t cols, int64_t r0, int64_t r1, const float* x,
                       int64_t n, float* y, int64_t ldy, int64_t token_chunk) {
  token_chunk = std::max<int64_t>(1, token_chunk);
  for (int64_t tc = 0; tc < n; tc += token_chunk) {
    const int64_t tn = std::min(token_chunk, n - tc);
    const float* xs[kTokens];
    int64_t t = 0;
    for (; t + kTokens <= tn; t += kTokens) {
      for (int j = 0; j < kTokens; j++) xs[j] = x + (tc + t + j) * cols;
      bf16_rows_tokens<kTokens>(w, stride, cols, r0, r1, xs, y, ldy, tc + t);
    }
    for (int j = 0; t + j < tn; j++) xs[j] = x + (tc + t + j) * cols;
    if (tn - t == 2) bf16_rows_tokens<2>(w, stride, cols, r0, r1, xs, y, ldy, tc + t);
    if (tn - t == 1) bf16_rows_tokens<1>(w, stride, cols, r0, r1, xs, y, ldy, tc + t);
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
  static const FloatTiles t{"avx2", gemm_float_avx2, bf16_in_dot_order, 8};
  return t;
}

}  // namespace kestrel

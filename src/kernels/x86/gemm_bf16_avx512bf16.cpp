// Compiled with AVX-512 F/BW/VL/DQ/BF16; called only when the CPU has them.
#include <immintrin.h>

#include <algorithm>

#include "kernels/gemm_bf16.h"

namespace kestrel {
namespace {

inline __m512bh load_bh(const uint16_t* p) { return (__m512bh)_mm512_loadu_si512(p); }
inline __m512bh load_bh(const uint16_t* p, __mmask32 m) { return (__m512bh)_mm512_maskz_loadu_epi16(m, p); }

// R rows x T tokens in ggml's AVX512-BF16 row-dot order: two accumulators per output over 64-element steps
// (the first 32 and the last 32), each reduced and summed in double, the tail in double.
template <int R, int T>
void tile(const uint16_t* const* rows, int64_t cols, const uint16_t* const* xs, float* y, int64_t ldy, int64_t r,
          int64_t t0) {
  __m512 c1[R][T], c2[R][T];
  for (int i = 0; i < R; i++)
    for (int t = 0; t < T; t++) c1[i][t] = c2[i][t] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 64 <= cols; k += 64) {
    for (int h = 0; h < 2; h++) {
      __m512bh xv[T];
      for (int t = 0; t < T; t++) xv[t] = load_bh(xs[t] + k + 32 * h);
      for (int i = 0; i < R; i++) {
        const __m512bh wv = load_bh(rows[i] + k + 32 * h);
        for (int t = 0; t < T; t++) {
          if (h == 0) c1[i][t] = _mm512_dpbf16_ps(c1[i][t], wv, xv[t]);
          else c2[i][t] = _mm512_dpbf16_ps(c2[i][t], wv, xv[t]);
        }
      }
    }
  }
  for (int i = 0; i < R; i++)
    for (int t = 0; t < T; t++) {
      double sum = 0;
      sum += static_cast<double>(_mm512_reduce_add_ps(c1[i][t]));
      sum += static_cast<double>(_mm512_reduce_add_ps(c2[i][t]));
      for (int64_t j = k; j < cols; j++) {
        uint32_t a = static_cast<uint32_t>(rows[i][j]) << 16, b = static_cast<uint32_t>(xs[t][j]) << 16;
        float fa, fb;
        __builtin_memcpy(&fa, &a, 4);
        __builtin_memcpy(&fb, &b, 4);
        sum += static_cast<double>(fa * fb);
      }
      y[(t0 + t) * ldy + r + i] = static_cast<float>(sum);
    }
}

template <int R>
void rows_all_tokens(const uint16_t* const* rows, int64_t cols, const uint16_t* x, int64_t n, float* y, int64_t ldy,
                     int64_t r) {
  const uint16_t* xs[3];
  int64_t t = 0;
  for (; t + 3 <= n; t += 3) {
    for (int i = 0; i < 3; i++) xs[i] = x + (t + i) * cols;
    tile<R, 3>(rows, cols, xs, y, ldy, r, t);
  }
  const int rest = static_cast<int>(n - t);
  for (int i = 0; i < rest; i++) xs[i] = x + (t + i) * cols;
  if (rest == 2) tile<R, 2>(rows, cols, xs, y, ldy, r, t);
  if (rest == 1) tile<R, 1>(rows, cols, xs, y, ldy, r, t);
}

// R rows x T tokens in llama.cpp's GEMM order for BF16 batches (llamafile's tinyBLAS<32, __m512, __m512bh>):
// one accumulator per output, vdpbf16ps over 32-element steps, _mm512_reduce_add_ps at the end. cols is a
// multiple of 32 (the caller checks ggml's conditions).
template <int R, int T>
void gemm_order_tile(const uint16_t* const* rows, int64_t cols, const uint16_t* const* xs, float* y, int64_t ldy,
                     int64_t r, int64_t t0) {
  __m512 c[R][T];
  for (int i = 0; i < R; i++)
    for (int t = 0; t < T; t++) c[i][t] = _mm512_setzero_ps();
  for (int64_t k = 0; k < cols; k += 32) {
    __m512bh xv[T];
    for (int t = 0; t < T; t++) xv[t] = load_bh(xs[t] + k);
    for (int i = 0; i < R; i++) {
      const __m512bh wv = load_bh(rows[i] + k);
      for (int t = 0; t < T; t++) c[i][t] = _mm512_dpbf16_ps(c[i][t], wv, xv[t]);
    }
  }
  for (int t = 0; t < T; t++)
    for (int i = 0; i < R; i++) y[(t0 + t) * ldy + r + i] = _mm512_reduce_add_ps(c[i][t]);
}

// Tokens [t, t + n) of a row group in tiles of at most 6 (4 x 6: 24 accumulators, 6 activation vectors and a
// weight vector of the 32 registers, tinyBLAS's shape too).
template <int R, int T = 6>
void gemm_order_tokens(const uint16_t* const* rows, int64_t cols, const uint16_t* x, int64_t t, int64_t n, float* y,
                       int64_t ldy, int64_t r) {
  if constexpr (T > 0) {
    const uint16_t* xs[T];
    for (; n >= T; n -= T, t += T) {
      for (int i = 0; i < T; i++) xs[i] = x + (t + i) * cols;
      gemm_order_tile<R, T>(rows, cols, xs, y, ldy, r, t);
    }
    if (n > 0) gemm_order_tokens<R, T - 1>(rows, cols, x, t, n, y, ldy, r);
  }
}


static void convert_to_bf16(const float* x, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
    _mm512_storeu_si512(dst + i, (__m512i)v);
  }
  for (; i < n; i += 16) {
    const auto m = static_cast<__mmask16>(n - i >= 16 ? 0xFFFF : (1u << (n - i)) - 1);
    const __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + i));
    _mm256_mask_storeu_epi16(dst + i, m, (__m256i)v);
  }
}

// Rows [r0, r1) x all tokens, in the row dot's order (kGemmOrder false) or llama.cpp's GEMM's.
template <bool kGemmOrder>
void gemm_rows(const uint8_t* w, size_t stride, int64_t cols, int64_t r0, int64_t r1, const uint16_t* x, int64_t n,
               float* y, int64_t ldy, int64_t token_chunk) {
  token_chunk = std::max<int64_t>(1, token_chunk);
  auto row = [&](int64_t r) { return reinterpret_cast<const uint16_t*>(w + r * stride); };
  auto group = [&](auto rows_in_group, const uint16_t* const* rows, const uint16_t* xc, int64_t tn, float* yc,
                   int64_t r) {
    constexpr int R = decltype(rows_in_group)::value;
    if constexpr (kGemmOrder) gemm_order_tokens<R>(rows, cols, xc, 0, tn, yc, ldy, r);
    else rows_all_tokens<R>(rows, cols, xc, tn, yc, ldy, r);
  };
  // Activations of a chunk of tokens stay in L2 while the rows stream past.
  for (int64_t tc = 0; tc < n; tc += token_chunk) {
    const int64_t tn = std::min(token_chunk, n - tc);
    const uint16_t* xc = x + tc * cols;
    float* yc = y + tc * ldy;
    int64_t r = r0;
    // One token streams the weights once: row after row is one linear stream
    // for the prefetcher (four rows at a time would be four short ones).
    // Row-dot order: four rows x three tokens, two accumulators an output (24); GEMM order: 4 x 6, one each.
    for (; r + 4 <= r1 && (kGemmOrder || n > 1); r += 4) {
      const uint16_t* rows[4] = {row(r), row(r + 1), row(r + 2), row(r + 3)};
      group(std::integral_constant<int, 4>{}, rows, xc, tn, yc, r);
    }
    for (; r < r1; r++) {
      const uint16_t* rows[1] = {row(r)};
      group(std::integral_constant<int, 1>{}, rows, xc, tn, yc, r);
    }
  }
}

}  // namespace

const Bf16Tiles& avx512bf16_tiles() {
  static const Bf16Tiles t{"avx512 bf16", convert_to_bf16, gemm_rows<false>, gemm_rows<true>, 32};
  return t;
}

}  // namespace kestrel

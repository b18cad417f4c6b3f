// Compiled with AVX-512 F/BW/VL/DQ/VNNI; called only when the CPU has them.
#include <immintrin.h>

#include <algorithm>

#include "kernels/x86/avx512_helpers.h"
#include "kernels/gemm_q8.h"

namespace kestrel {
namespace {

using namespace avx512;

// Weights of one block as unsigned bytes u = q + bias (bias 128 for Q8_0, 8 for Q4_0).
template <GgmlType W>
inline __m256i weight_u8(const uint8_t* row, int64_t b) {
  if constexpr (W == GgmlType::Q8_0) {
    const auto* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
    return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qs)), _mm256_set1_epi8(char(0x80)));
  } else {
    return q4_nibbles((reinterpret_cast<const BlockQ4_0*>(row) + b)->qs);
  }
}

template <GgmlType W>
inline uint16_t weight_scale_bits(const uint8_t* row, int64_t b) {
  if constexpr (W == GgmlType::Q8_0) return (reinterpret_cast<const BlockQ8_0*>(row) + b)->d;
  else return (reinterpret_cast<const BlockQ4_0*>(row) + b)->d;
}

// The block scales of 2P rows, converted together, as P vectors whose low
// half holds row 2p's scale and high half row 2p+1's.
template <GgmlType W, int P>
inline void pair_scales(const uint8_t* const* rows, int64_t b, __m512* dw) {
  alignas(16) uint16_t bits[8] = {};
  for (int i = 0; i < 2 * P; i++) bits[i] = weight_scale_bits<W>(rows[i], b);
  const __m512 all = _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(bits))));
  for (int p = 0; p < P; p++) {
    const __m512i idx = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(2 * p)), _mm256_set1_epi32(2 * p + 1), 1);
    dw[p] = _mm512_permutexvar_ps(idx, all);
  }
}

// Weights of one block of two rows as unsigned bytes, row a in the low half.
template <GgmlType W>
inline __m512i pair_u8(const uint8_t* a, const uint8_t* b, int64_t blk) {
  if constexpr (W == GgmlType::Q8_0) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(weight_u8<W>(a, blk)), weight_u8<W>(b, blk), 1);
  } else {
    return q4_nibbles_two((reinterpret_cast<const BlockQ4_0*>(a) + blk)->qs, (reinterpret_cast<const BlockQ4_0*>(b) + blk)->qs);
  }
}

// 2*P rows (P pairs, one pair per zmm) x T tokens.
template <GgmlType W, int P, int T>
void tile(const uint8_t* const* rows, const QuantizedActivations& x, int64_t t0, float* y, int64_t ldy, int64_t r) {
  constexpr int kShift = W == GgmlType::Q8_0 ? 7 : 3;  // bias 128 or 8 times the lane sums
  __m512 acc[P][T];
  for (int p = 0; p < P; p++)
    for (int t = 0; t < T; t++) acc[p][t] = _mm512_setzero_ps();
  const int64_t nb = x.n_blocks;
  for (int64_t b = 0; b < nb; b++) {
    __m512i wq[P];
    __m512 dw[P];
    for (int p = 0; p < P; p++) wq[p] = pair_u8<W>(rows[2 * p], rows[2 * p + 1], b);
    pair_scales<W, P>(rows, b, dw);
    for (int t = 0; t < T; t++) {
      const BlockQ8_0& xb = x.blocks[(t0 + t) * nb + b];
      const __m512i xq = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qs)));
      const __m512i sums = _mm512_broadcast_i64x4(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.lane_sums + ((t0 + t) * nb + b) * 8)));
      const __m512i start = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sums, kShift));
      const __m512 dx = _mm512_set1_ps(f16(xb.d));
      for (int p = 0; p < P; p++) {
        const __m512i s = _mm512_dpbusd_epi32(start, wq[p], xq);  // = sum of q*x per 4-byte lane
        acc[p][t] = _mm512_fmadd_ps(_mm512_mul_ps(dw[p], dx), _mm512_cvtepi32_ps(s), acc[p][t]);
      }
    }
  }
  for (int p = 0; p < P; p++)
    for (int t = 0; t < T; t++) {
      y[(t0 + t) * ldy + r + 2 * p] = hsum8(_mm512_castps512_ps256(acc[p][t]));
      y[(t0 + t) * ldy + r + 2 * p + 1] = hsum8(_mm512_extractf32x8_ps(acc[p][t], 1));
    }
}

template <GgmlType W, int P>
void rows_all_tokens(const uint8_t* const* rows, const QuantizedActivations& x, int64_t t_begin, int64_t t_end,
                     float* y, int64_t ldy, int64_t r) {
  int64_t t = t_begin;
  for (; t + 4 <= t_end; t += 4) tile<W, P, 4>(rows, x, t, y, ldy, r);
  switch (t_end - t) {
    case 3: tile<W, P, 3>(rows, x, t, y, ldy, r); break;
    case 2: tile<W, P, 2>(rows, x, t, y, ldy, r); break;
    case 1: tile<W, P, 1>(rows, x, t, y, ldy, r); break;
    default: break;
  }
}

template <GgmlType W>
void gemm(const uint8_t* w, size_t stride, int64_t r0, int64_t r1, const QuantizedActivations& x, float* y, int64_t ldy,
          int64_t kTokenChunk) {
  // Tokens in chunks whose activations stay in L2 while the rows stream past.
  for (int64_t tc = 0; tc < x.n_tokens; tc += kTokenChunk) {
    const int64_t tc_end = std::min(x.n_tokens, tc + kTokenChunk);
    int64_t r = r0;
    for (; r + 8 <= r1; r += 8) {
      const uint8_t* rows[8];
      for (int i = 0; i < 8; i++) rows[i] = w + (r + i) * stride;
      rows_all_tokens<W, 4>(rows, x, tc, tc_end, y, ldy, r);
    }
    for (; r + 4 <= r1; r += 4) {
      const uint8_t* rows[4] = {w + r * stride, w + (r + 1) * stride, w + (r + 2) * stride, w + (r + 3) * stride};
      rows_all_tokens<W, 2>(rows, x, tc, tc_end, y, ldy, r);
    }
    for (; r + 2 <= r1; r += 2) {
      const uint8_t* rows[2] = {w + r * stride, w + (r + 1) * stride};
      rows_all_tokens<W, 1>(rows, x, tc, tc_end, y, ldy, r);
    }
    if (r < r1) {  // an odd last row: pair it with itself, keep one result
      const uint8_t* rows[2] = {w + r * stride, w + r * stride};
      float tmp_row[2 * 256];  // token chunks are at most 256
      // Write into a scratch with ldy 2 and copy the first column back.
      rows_all_tokens<W, 1>(rows, QuantizedActivations{x.blocks + tc * x.n_blocks, x.lane_sums + tc * x.n_blocks * 8,
                                                       tc_end - tc, x.n_blocks},
                            0, tc_end - tc, tmp_row, 2, 0);
      for (int64_t t = tc; t < tc_end; t++) y[t * ldy + r] = tmp_row[(t - tc) * 2];
    }
  }
}

}  // namespace

static void compute_lane_sums(const BlockQ8_0* x, int64_t n_blocks_total, int32_t* lane_sums) {
  const __m256i ones = _mm256_set1_epi8(1);
  for (int64_t i = 0; i < n_blocks_total; i++) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lane_sums + i * 8), _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, q));
  }
}

static void gemm_q8_vnni(GgmlType wtype, const uint8_t* w, size_t row_stride, int64_t r0, int64_t r1,
                  const QuantizedActivations& x, float* y, int64_t ldy, int64_t token_chunk) {
  token_chunk = std::clamp<int64_t>(token_chunk, 1, 256);
  if (wtype == GgmlType::Q8_0) gemm<GgmlType::Q8_0>(w, row_stride, r0, r1, x, y, ldy, token_chunk);
  else gemm<GgmlType::Q4_0>(w, row_stride, r0, r1, x, y, ldy, token_chunk);
}

const Int8Tiles& avx512vnni_int8_tiles() {
  static const Int8Tiles t{"avx512 vnni", compute_lane_sums, gemm_q8_vnni};
  return t;
}

}  // namespace kestrel

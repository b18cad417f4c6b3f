// Compiled with AVX-512 F/BW/VL/DQ/VNNI; called only when the CPU has them.
// The micro-kernel: 16 rows (one group, one row per lane) x T tokens; the
// block's 8 weight vectors stay in registers while every token's activations
// are broadcast 4 bytes at a time straight from memory into vpdpbusd.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/packed_q8.h"

namespace kestrel {
namespace {

constexpr int G = PackedWeight::kRowsPerGroup;

inline __m512i load_i32_broadcast(const int8_t *p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// The block's unsigned weights: w[k] lane i = quants 4k..4k+3 of row i.
template <GgmlType W> inline void load_block(const uint8_t *q, __m512i *w) {
  if constexpr (W == GgmlType::Q8_0) {
    for (int k = 0; k < 8; k++)
      w[k] = _mm512_load_si512(q + 64 * k);
  } else {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    for (int k = 0; k < 4; k++) {
      const __m512i v = _mm512_load_si512(q + 64 * k);
      w[k] = _mm512_and_si512(v, low4);
      w[k + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
    }
  }
}

template <GgmlType W, int T>
void tile(const PackedWeight &pw, int64_t g, const PackedActivations &x,
          int64_t t0, float *y, int64_t ldy) {
  const int64_t nb = pw.n_blocks;
  const size_t qb = pw.quant_bytes_per_block();
  const uint8_t *q = pw.group_quants(g);
  const uint16_t *s = pw.group_scales(g);
  __m512 acc[T];
  for (int t = 0; t < T; t++)
    acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    __m512i w[8];
    load_block<W>(q + b * qb, w);
    const __m512 dw = _mm512_cvtph_ps(
        _mm256_load_si256(reinterpret_cast<const __m256i *>(s + b * G)));
    for (int t = 0; t < T; t++) {
      const int64_t xi = (t0 + t) * nb + b;
      const int8_t *a = x.q[xi].qs;
      __m512i dot = _mm512_set1_epi32(x.bias[xi]);
      for (int k = 0; k < 8; k++)
        dot = _mm512_dpbusd_epi32(dot, w[k], load_i32_broadcast(a + 4 * k));
      acc[t] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot),
                          _mm512_mul_ps(dw, _mm512_set1_ps(x.d[xi])), acc[t]);
    }
  }
  const int64_t r = g * G;
  const __mmask16 mask = pw.rows - r >= G
                             ? __mmask16(0xFFFF)
                             : __mmask16((1u << (pw.rows - r)) - 1);
  for (int t = 0; t < T; t++)
    _mm512_mask_storeu_ps(y + (t0 + t) * ldy + r, mask, acc[t]);
}

template <GgmlType W>
void group_tokens(const PackedWeight &pw, int64_t g, const PackedActivations &x,
                  int64_t t_begin, int64_t t_end, float *y, int64_t ldy) {
  constexpr int kT = 8;
  int64_t t = t_begin;
  for (; t + kT <= t_end; t += kT)
    tile<W, kT>(pw, g, x, t, y, ldy);
  switch (t_end - t) {
  case 7:
    tile<W, 7>(pw, g, x, t, y, ldy);
    break;
  case 6:
    tile<W, 6>(pw, g, x, t, y, ldy);
    break;
  case 5:
    tile<W, 5>(pw, g, x, t, y, ldy);
    break;
  case 4:
    tile<W, 4>(pw, g, x, t, y, ldy);
    break;
  case 3:
    tile<W, 3>(pw, g, x, t, y, ldy);
    break;
  case 2:
    tile<W, 2>(pw, g, x, t, y, ldy);
    break;
  case 1:
    tile<W, 1>(pw, g, x, t, y, ldy);
    break;
  default:
    break;
  }
}

template <GgmlType W>
void gemm(const PackedWeight &pw, int64_t g0, int64_t g1,
          const PackedActivations &x, float *y, int64_t ldy,
          int64_t token_chunk) {
  // Tokens in chunks whose activations stay in L2 while the groups stream past.
  for (int64_t tc = 0; tc < x.n_tokens; tc += token_chunk) {
    const int64_t tc_end = std::min(x.n_tokens, tc + token_chunk);
    for (int64_t g = g0; g < g1; g++)
      group_tokens<W>(pw, g, x, tc, tc_end, y, ldy);
  }
}

} // namespace

void packed_gemm_vnni(const PackedWeight &w, int64_t g0, int64_t g1,
                      const PackedActivations &x, float *y, int64_t ldy,
                      int64_t token_chunk) {
  token_chunk = std::clamp<int64_t>(token_chunk, 1, 256);
  if (w.type == GgmlType::Q8_0)
    gemm<GgmlType::Q8_0>(w, g0, g1, x, y, ldy, token_chunk);
  else
    gemm<GgmlType::Q4_0>(w, g0, g1, x, y, ldy, token_chunk);
}

} // namespace kestrel

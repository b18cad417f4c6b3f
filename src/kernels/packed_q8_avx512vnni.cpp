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

using PA = PackedActivations;

inline __m512i broadcast_i32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

inline __m512 broadcast_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_ps(v);
}

// The block's unsigned weights: w[k] lane i = quants 4k..4k+3 of row i.
template <GgmlType W>
inline void load_block(const uint8_t *q, __m512i *w) {
  if constexpr (W == GgmlType::Q8_0) {
    for (int k = 0; k < 8; k++) w[k] = _mm512_load_si512(q + 64 * k);
  } else {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    for (int k = 0; k < 4; k++) {
      const __m512i v = _mm512_load_si512(q + 64 * k);
      w[k] = _mm512_and_si512(v, low4);
      w[k + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
    }
  }
}

// Token tile `tile` (its first T tokens) x group g.
template <GgmlType W, int T>
void tile(const PackedWeight& pw, int64_t g, const PackedActivations& x, int64_t tile, float* y, int64_t ldy) {
  const int64_t nb = pw.n_blocks;
  const size_t qb = pw.quant_bytes_per_block();
  const uint8_t* q = pw.group_quants(g);
  const uint16_t* s = pw.group_scales(g);
  const uint8_t* a = x.block(tile, 0);  // advances PA::kBytesPerBlock per block: constant offsets inside
  __m512 acc[T];
  for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b++, q += qb, a += PA::kBytesPerBlock) {
    __m512i w[8];
    load_block<W>(q, w);
    const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(s + b * G)));
    for (int t = 0; t < T; t++) {
      __m512i dot = broadcast_i32(a + PA::kBiasOffset + 4 * t);
      for (int k = 0; k < 8; k++) dot = _mm512_dpbusd_epi32(dot, w[k], broadcast_i32(a + kQK8_0 * t + 4 * k));
      const __m512 scale = _mm512_mul_ps(dw, broadcast_f32(a + PA::kScaleOffset + 4 * t));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[t]);
    }
  }
  const int64_t r = g * G;
  const __mmask16 mask = pw.rows - r >= G ? __mmask16(0xFFFF) : __mmask16((1u << (pw.rows - r)) - 1);
  const int64_t t0 = tile * PA::kTokensPerTile;
  for (int t = 0; t < T; t++) _mm512_mask_storeu_ps(y + (t0 + t) * ldy + r, mask, acc[t]);
}

template <GgmlType W>
void group_tiles(const PackedWeight& pw, int64_t g, const PackedActivations& x, int64_t tile_begin, int64_t tile_end,
                 float* y, int64_t ldy) {
  for (int64_t i = tile_begin; i < tile_end; i++) {
    switch (std::min<int64_t>(PA::kTokensPerTile, x.n_tokens - i * PA::kTokensPerTile)) {
      case 8: tile<W, 8>(pw, g, x, i, y, ldy); break;
      case 7: tile<W, 7>(pw, g, x, i, y, ldy); break;
      case 6: tile<W, 6>(pw, g, x, i, y, ldy); break;
      case 5: tile<W, 5>(pw, g, x, i, y, ldy); break;
      case 4: tile<W, 4>(pw, g, x, i, y, ldy); break;
      case 3: tile<W, 3>(pw, g, x, i, y, ldy); break;
      case 2: tile<W, 2>(pw, g, x, i, y, ldy); break;
      case 1: tile<W, 1>(pw, g, x, i, y, ldy); break;
      default: break;
    }
  }
}

template <GgmlType W>
void gemm(const PackedWeight& pw, int64_t g0, int64_t g1, const PackedActivations& x, float* y, int64_t ldy,
          int64_t token_chunk) {
  // Token tiles in chunks whose activations stay in L2 while the groups stream past.
  const int64_t tiles_per_chunk = (token_chunk + PA::kTokensPerTile - 1) / PA::kTokensPerTile;
  for (int64_t tc = 0; tc < x.n_tiles(); tc += tiles_per_chunk) {
    const int64_t tc_end = std::min(x.n_tiles(), tc + tiles_per_chunk);
    for (int64_t g = g0; g < g1; g++) group_tiles<W>(pw, g, x, tc, tc_end, y, ldy);
  }
}

}  // namespace

void packed_gemm_vnni(const PackedWeight &w, int64_t g0, int64_t g1, const PackedActivations &x, float *y, int64_t ldy,
                      int64_t token_chunk) {
  token_chunk = std::clamp<int64_t>(token_chunk, 1, 256);
  if (w.type == GgmlType::Q8_0)
    gemm<GgmlType::Q8_0>(w, g0, g1, x, y, ldy, token_chunk);
  else
    gemm<GgmlType::Q4_0>(w, g0, g1, x, y, ldy, token_chunk);
}

}  // namespace kestrel

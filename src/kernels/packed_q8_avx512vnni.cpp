// Compiled with AVX-512 F/BW/VL/DQ/VNNI; called only when the CPU has them.
// The micro-kernel: NG row groups (16 rows each, one row per lane) x T tokens;
// the block's weight vectors stay in registers while every token's
// activations are broadcast 4 bytes at a time into vpdpbusd. Batches run
// 2 groups x 4 tokens (each broadcast feeds two vpdpbusd); a single token
// runs 1 group x 1 token (decode streams weights once: fewer concurrent
// streams measured faster).
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
template <PackedKind W>
inline void load_block(const uint8_t* q, __m512i* w) {
  if constexpr (W == PackedKind::Q8_0 || W == PackedKind::K8 || W == PackedKind::K8Z) {
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

// Tokens T0..T0+T-1 of token tile `tile` x NG consecutive groups from g:
// with two groups each broadcast activation word feeds two vpdpbusd.
// The general form (K4/K8): per block and token, the integer dot of each
// sub-block scaled by its row's scale, then each offset times the
// activations' sum over the sub-block (packed_gemm_reference's order).
template <PackedKind W, int T0, int T, int NG>
void ktile_kernel(const PackedWeight& pw, int64_t g, const PackedActivations& x, int64_t tile, float* y, int64_t ldy) {
  constexpr int kSub = W == PackedKind::K4 ? 1 : 2;
  constexpr bool kZero = W == PackedKind::K8Z;
  const int32_t z = pw.zero_level;
  const int64_t nb = pw.n_blocks;
  const uint8_t* a = x.block(tile, 0);
  __m512 acc[NG][T];
  for (int i = 0; i < NG; i++)
    for (int t = 0; t < T; t++) acc[i][t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b++, a += PA::kBytesPerBlock) {
    __m512i w[NG][8];
    __m512 sc[NG][kSub], off[NG][kSub];
    for (int i = 0; i < NG; i++) {
      load_block<W>(pw.kquants(g + i, b), w[i]);
      for (int h = 0; h < kSub; h++) {
        sc[i][h] = _mm512_load_ps(pw.kscales(g + i, b) + 16 * h);
        if constexpr (!kZero) off[i][h] = _mm512_load_ps(pw.koffsets(g + i, b) + 16 * h);
      }
    }
    for (int t = T0; t < T0 + T; t++) {
      const __m512 dx = broadcast_f32(a + PA::kScaleOffset + 4 * t);
      __m512i dot[NG][kSub];
      // K8Z: each sub-block's dot starts at -zero_level * (its activations' sum).
      __m512i start[kSub];
      for (int h = 0; h < kSub; h++) {
        int32_t isum = 0;
        if constexpr (kZero) std::memcpy(&isum, a + (h ? PA::kIntSumHiOffset : PA::kIntSumLoOffset) + 4 * t, 4);
        start[h] = _mm512_set1_epi32(-z * isum);
      }
      for (int i = 0; i < NG; i++)
        for (int h = 0; h < kSub; h++) dot[i][h] = start[h];
      for (int k = 0; k < 8; k++) {
        const __m512i xk = broadcast_i32(a + kQK8_0 * t + 4 * k);
        const int h = kSub == 2 ? k / 4 : 0;
        for (int i = 0; i < NG; i++) dot[i][h] = _mm512_dpbusd_epi32(dot[i][h], w[i][k], xk);
      }
      for (int i = 0; i < NG; i++) {
        __m512 r = acc[i][t - T0];
        for (int h = 0; h < kSub; h++) r = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[i][h]), _mm512_mul_ps(sc[i][h], dx), r);
        if constexpr (kZero) {
          // the offsets are in the dots already
        } else if constexpr (kSub == 1) {
          r = _mm512_fmadd_ps(off[i][0], broadcast_f32(a + PA::kSumOffset + 4 * t), r);
        } else {
          r = _mm512_fmadd_ps(off[i][0], broadcast_f32(a + PA::kSumLoOffset + 4 * t), r);
          r = _mm512_fmadd_ps(off[i][1], broadcast_f32(a + PA::kSumHiOffset + 4 * t), r);
        }
        acc[i][t - T0] = r;
      }
    }
  }
  const int64_t t0 = tile * PA::kTokensPerTile + T0;
  for (int i = 0; i < NG; i++) {
    const int64_t r = (g + i) * G;
    const __mmask16 mask = pw.rows - r >= G ? __mmask16(0xFFFF) : __mmask16((1u << (pw.rows - r)) - 1);
    for (int t = 0; t < T; t++) _mm512_mask_storeu_ps(y + (t0 + t) * ldy + r, mask, acc[i][t]);
  }
}

template <PackedKind W, int T0, int T, int NG>
void tile_kernel(const PackedWeight& pw, int64_t g, const PackedActivations& x, int64_t tile, float* y, int64_t ldy) {
  if constexpr (W == PackedKind::K4 || W == PackedKind::K8 || W == PackedKind::K8Z) {
    ktile_kernel<W, T0, T, NG>(pw, g, x, tile, y, ldy);
    return;
  }
  const int64_t nb = pw.n_blocks;
  const uint8_t* a = x.block(tile, 0);  // advances PA::kBytesPerBlock per block: constant offsets inside
  __m512 acc[NG][T];
  for (int i = 0; i < NG; i++)
    for (int t = 0; t < T; t++) acc[i][t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b++, a += PA::kBytesPerBlock) {
    __m512i w[NG][8];
    __m512 dw[NG];
    for (int i = 0; i < NG; i++) {
      load_block<W>(pw.block_quants(g + i, b), w[i]);
      dw[i] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(pw.block_scales(g + i, b))));
    }
    for (int t = T0; t < T0 + T; t++) {
      const __m512i bias = broadcast_i32(a + PA::kBiasOffset + 4 * t);
      __m512i dot[NG];
      for (int i = 0; i < NG; i++) dot[i] = bias;
      for (int k = 0; k < 8; k++) {
        const __m512i xk = broadcast_i32(a + kQK8_0 * t + 4 * k);
        for (int i = 0; i < NG; i++) dot[i] = _mm512_dpbusd_epi32(dot[i], w[i][k], xk);
      }
      const __m512 dx = broadcast_f32(a + PA::kScaleOffset + 4 * t);
      for (int i = 0; i < NG; i++)
        acc[i][t - T0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[i]), _mm512_mul_ps(dw[i], dx), acc[i][t - T0]);
    }
  }
  const int64_t t0 = tile * PA::kTokensPerTile + T0;
  for (int i = 0; i < NG; i++) {
    const int64_t r = (g + i) * G;
    const __mmask16 mask = pw.rows - r >= G ? __mmask16(0xFFFF) : __mmask16((1u << (pw.rows - r)) - 1);
    for (int t = 0; t < T; t++) _mm512_mask_storeu_ps(y + (t0 + t) * ldy + r, mask, acc[i][t]);
  }
}

// Tokens T0..T0+n-1 of a token tile in kernels of at most TMax tokens.
template <PackedKind W, int T0, int TMax, int NG>
void tokens(const PackedWeight& pw, int64_t g, const PackedActivations& x, int64_t tile, int64_t n, float* y,
            int64_t ldy) {
  if constexpr (TMax > 0 && T0 < PA::kTokensPerTile) {
    if (n >= TMax) {
      tile_kernel<W, T0, TMax, NG>(pw, g, x, tile, y, ldy);
      if (n > TMax) tokens<W, T0 + TMax, TMax, NG>(pw, g, x, tile, n - TMax, y, ldy);
    } else {
      tokens<W, T0, TMax - 1, NG>(pw, g, x, tile, n, y, ldy);
    }
  }
}

// Token tiles [tile_begin, tile_end) x NG groups from g. Registers bound the
// tokens per kernel: 8 weight vectors, a scale and an accumulator per token
// with one group; twice the weights and accumulators with two.
template <PackedKind W, int NG>
void group_tiles(const PackedWeight& pw, int64_t g, const PackedActivations& x, int64_t tile_begin, int64_t tile_end,
                 float* y, int64_t ldy) {
  // The general form holds scales and offsets per sub-block too: fewer tokens fit beside them.
  constexpr bool kGeneral = W == PackedKind::K4 || W == PackedKind::K8 || W == PackedKind::K8Z;
  constexpr int kMaxTokens = NG == 2 ? (kGeneral ? 3 : 4) : 8;
  for (int64_t i = tile_begin; i < tile_end; i++) {
    const int64_t n = std::min<int64_t>(PA::kTokensPerTile, x.n_tokens - i * PA::kTokensPerTile);
    tokens<W, 0, kMaxTokens, NG>(pw, g, x, i, n, y, ldy);
  }
}

template <PackedKind W>
void gemm(const PackedWeight& pw, int64_t g0, int64_t g1, const PackedActivations& x, float* y, int64_t ldy,
          int64_t token_chunk) {
  // Token tiles in chunks whose activations stay in L2 while the groups stream past.
  const int64_t tiles_per_chunk = (token_chunk + PA::kTokensPerTile - 1) / PA::kTokensPerTile;
  for (int64_t tc = 0; tc < x.n_tiles(); tc += tiles_per_chunk) {
    const int64_t tc_end = std::min(x.n_tiles(), tc + tiles_per_chunk);
    int64_t g = g0;
    // The general form holds scales and offsets beside the weights: one group at a time keeps a whole
    // 8-token tile in registers (two groups would split it into three passes).
    constexpr bool kGeneralForm = W == PackedKind::K4 || W == PackedKind::K8 || W == PackedKind::K8Z;
    if constexpr (!kGeneralForm)
      for (; g + 2 <= g1 && x.n_tokens > 1; g += 2) group_tiles<W, 2>(pw, g, x, tc, tc_end, y, ldy);
    for (; g < g1; g++) group_tiles<W, 1>(pw, g, x, tc, tc_end, y, ldy);
  }
}

}  // namespace

void packed_gemm_vnni(const PackedWeight& w, int64_t g0, int64_t g1, const PackedActivations& x, float* y, int64_t ldy,
                      int64_t token_chunk) {
  token_chunk = std::clamp<int64_t>(token_chunk, 1, 256);
  switch (w.kind) {
    case PackedKind::Q8_0: gemm<PackedKind::Q8_0>(w, g0, g1, x, y, ldy, token_chunk); break;
    case PackedKind::Q4_0: gemm<PackedKind::Q4_0>(w, g0, g1, x, y, ldy, token_chunk); break;
    case PackedKind::K4: gemm<PackedKind::K4>(w, g0, g1, x, y, ldy, token_chunk); break;
    case PackedKind::K8: gemm<PackedKind::K8>(w, g0, g1, x, y, ldy, token_chunk); break;
    case PackedKind::K8Z: gemm<PackedKind::K8Z>(w, g0, g1, x, y, ldy, token_chunk); break;
  }
}

}  // namespace kestrel

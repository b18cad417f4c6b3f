// Compiled with AVX-512 F/BW/VL/DQ; called only when the CPU has them.
#include <immintrin.h>

#include <algorithm>
#include <limits>

#include "kernels/isa_dispatch.h"
#include "hw/cpu_features.h"
#include "kernels/attention_tile.h"
#include "kernels/exp_cephes.h"

namespace kestrel {
namespace {

constexpr int kLanes = AttentionTile::kMaxRows;
constexpr int kMaxHeadDim = 576;  // DeepSeek MLA attends over 512 latent + 64 rotary dims

// exp(x) for 16 floats (Cephes expf, exp_cephes.h), scaled by 2^n with
// vscalefps so large negative x give 0.
inline __m512 exp16(__m512 x) {
  using namespace exp_cephes;
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(kMaxX)), _mm512_set1_ps(-104.0f));
  const __m512 fx = _mm512_roundscale_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(kLog2e), _mm512_set1_ps(0.5f)),
                                         _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(kLn2Hi), x);
  x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(kLn2Lo), x);
  __m512 y = _mm512_set1_ps(kPoly[0]);
  for (int i = 1; i < 6; i++) y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(kPoly[i]));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(x, x), _mm512_add_ps(x, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(y, fx);
}

// tanh(x) = 1 - 2 / (exp(2x) + 1): saturates to +-1 where exp16 clamps.
inline __m512 tanh16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 e = exp16(_mm512_add_ps(x, x));
  return _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one)));
}

}  // namespace

static bool tile_fits(int head_dim, int v_dim) {
  auto fits = [](int d) { return d % 16 == 0 && d > 0 && d <= kMaxHeadDim; };
  return fits(head_dim) && fits(v_dim);
}

static void attend_tile(const PagedKvLayerView& kv, const AttentionTile& tile, int hd, int vd, float scale, float softcap,
                 int32_t p0, int32_t p1, float* out, float* m_out, float* l_out) {
  alignas(64) float qt[kMaxHeadDim][kLanes];  // scaled queries, transposed: qt[d] = dimension d of every row
  alignas(64) float ot[kMaxHeadDim][kLanes];  // the weighted values, transposed
  alignas(64) float pj[kLanes][kLanes];       // one chunk's probabilities: pj[j] = position j for every row
  alignas(64) int32_t lim[kLanes], fst[kLanes];
  int32_t end = p0;
  for (int r = 0; r < kLanes; r++) {
    // Unused lanes repeat row 0's query with no positions: harmless, discarded.
    const float* q = tile.q[r < tile.rows ? r : 0];
    for (int d = 0; d < hd; d++) qt[d][r] = q[d] * scale;
    lim[r] = r < tile.rows ? std::min(tile.limit[r], p1) : 0;
    fst[r] = r < tile.rows ? tile.first[r] : 0;
    end = std::max(end, lim[r]);
  }
  for (int d = 0; d < vd; d++) _mm512_store_ps(ot[d], _mm512_setzero_ps());
  const __m512i limits = _mm512_load_si512(lim), firsts = _mm512_load_si512(fst);
  const bool capped = softcap > 0.0f;
  const __m512 cap = _mm512_set1_ps(softcap), inv_cap = _mm512_set1_ps(capped ? 1.0f / softcap : 0.0f);
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 m = neg_inf, l = _mm512_setzero_ps();
  const int64_t k_off = static_cast<int64_t>(tile.kv_head) * hd, v_off = static_cast<int64_t>(tile.kv_head) * vd;
  // Quantized rows: one chunk's keys and values dequantized here, read by every row of the tile.
  const bool dequant = kv.k_format.type() != KvType::F32 || kv.v_format.type() != KvType::F32;
  alignas(64) float kq[kLanes][kMaxHeadDim];
  alignas(64) float vq[kLanes][kMaxHeadDim];

  for (int32_t p = p0; p < end; p += kLanes) {
    const int n = std::min<int32_t>(kLanes, end - p);
    const float* kr[kLanes];
    const float* vr[kLanes];
    for (int j = 0; j < kLanes; j++) {
      const int32_t pos = p + std::min(j, n - 1);  // past the end: repeat the last key, masked below
      const int64_t slot = static_cast<int64_t>(tile.table[pos / kv.block_size]) * kv.block_size + pos % kv.block_size;
      if (!dequant) {
        kr[j] = reinterpret_cast<const float*>(kv.k_row(slot)) + k_off;
        vr[j] = reinterpret_cast<const float*>(kv.v_row(slot)) + v_off;
      } else if (j < n) {
        kv.k_format.dequantize(kv.k_row(slot), k_off, kq[j], hd);
        kv.v_format.dequantize(kv.v_row(slot), v_off, vq[j], vd);
        kr[j] = kq[j];
        vr[j] = vq[j];
      } else {
        kr[j] = kr[n - 1];
        vr[j] = vr[n - 1];
      }
    }
    // Scores of 16 positions for all rows: s[j] lane r = q_r . k_j.
    __m512 s[kLanes];
    for (int j = 0; j < kLanes; j++) s[j] = _mm512_setzero_ps();
    for (int d0 = 0; d0 < hd; d0 += 8) {
      __m512 qv[8];
      for (int i = 0; i < 8; i++) qv[i] = _mm512_load_ps(qt[d0 + i]);
      for (int j = 0; j < kLanes; j++)
        for (int i = 0; i < 8; i++) s[j] = _mm512_fmadd_ps(qv[i], _mm512_set1_ps(kr[j][d0 + i]), s[j]);
    }
    if (capped)
      for (int j = 0; j < n; j++) s[j] = _mm512_mul_ps(cap, tanh16(_mm512_mul_ps(s[j], inv_cap)));
    // Causal, window and range mask, then the online softmax, lane by lane.
    __mmask16 valid[kLanes];
    __m512 block_max = m;
    for (int j = 0; j < kLanes; j++) {
      const __m512i pos = _mm512_set1_epi32(p + j);
      valid[j] = j < n ? _mm512_cmplt_epi32_mask(pos, limits) & _mm512_cmpge_epi32_mask(pos, firsts) : __mmask16(0);
      s[j] = _mm512_mask_blend_ps(valid[j], neg_inf, s[j]);
      block_max = _mm512_max_ps(block_max, s[j]);
    }
    // Rows with nothing yet keep m = -inf: their correction is 1, not exp(nan).
    const __mmask16 live = _mm512_cmp_ps_mask(block_max, neg_inf, _CMP_NEQ_OQ);
    const __m512 corr = _mm512_mask_blend_ps(live, _mm512_set1_ps(1.0f), exp16(_mm512_sub_ps(m, block_max)));
    l = _mm512_mul_ps(l, corr);
    for (int j = 0; j < n; j++) {
      const __m512 e = _mm512_maskz_mov_ps(valid[j], exp16(_mm512_sub_ps(s[j], block_max)));
      l = _mm512_add_ps(l, e);
      _mm512_store_ps(pj[j], e);
    }
    m = _mm512_mask_blend_ps(live, m, block_max);
    // ot[d] = ot[d] * corr + sum_j pj[j] * v_j[d], 16 dimensions at a time.
    for (int d0 = 0; d0 < vd; d0 += 16) {
      __m512 acc[16];
      for (int i = 0; i < 16; i++) acc[i] = _mm512_mul_ps(_mm512_load_ps(ot[d0 + i]), corr);
      for (int j = 0; j < n; j++) {
        const __m512 w = _mm512_load_ps(pj[j]);
        for (int i = 0; i < 16; i++) acc[i] = _mm512_fmadd_ps(w, _mm512_set1_ps(vr[j][d0 + i]), acc[i]);
      }
      for (int i = 0; i < 16; i++) _mm512_store_ps(ot[d0 + i], acc[i]);
    }
  }

  alignas(64) float ms[kLanes], ls[kLanes];
  _mm512_store_ps(ms, m);
  _mm512_store_ps(ls, l);
  for (int r = 0; r < tile.rows; r++) {
    const int64_t row = tile.out_row[r];
    float* o = out + row * vd;
    for (int d = 0; d < vd; d++) o[d] = ot[d][r];
    m_out[row] = ms[r];
    l_out[row] = ls[r];
  }
}

const AttentionTiles& avx512_attention_tiles() {
  static const AttentionTiles t{"avx512", tile_fits, attend_tile};
  return t;
}

}  // namespace kestrel

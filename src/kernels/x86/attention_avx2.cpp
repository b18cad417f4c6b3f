// The attention tile kernel (attention_tile.h) for AVX2 + FMA: the AVX-512
// kernel's scheme with 8 lanes. A tile's up to 16 query rows run as two passes
// of 8 rows, one row per lane, over chunks of 8 positions: queries transposed
// once per pass, scores for 8 rows from FMAs against broadcast key elements,
// the online softmax lane-wise with no horizontal reductions, values
// accumulated the same way. Called only when the CPU has AVX2/FMA.
#include <immintrin.h>

#include <algorithm>
#include <limits>

#include "kernels/attention_tile.h"
#include "kernels/exp_cephes.h"

namespace kestrel {
namespace {

constexpr int kLanes = 8;
constexpr int kMaxHeadDim = 576;  // DeepSeek MLA attends over 512 latent + 64 rotary dims

// exp(x) for 8 floats (Cephes expf, exp_cephes.h). x >= -104 reaches 2^-150: the power of two is applied in
// two halves, each a normal float, so tiny results round to subnormals or 0 as the AVX-512 kernel's vscalefps.
inline __m256 exp8(__m256 x) {
  using namespace exp_cephes;
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(kMaxX)), _mm256_set1_ps(-104.0f));
  const __m256 fx = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(kLog2e), _mm256_set1_ps(0.5f)));
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(kLn2Hi), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(kLn2Lo), x);
  __m256 y = _mm256_set1_ps(kPoly[0]);
  for (int i = 1; i < 6; i++) y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(kPoly[i]));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
  const __m256i n = _mm256_cvttps_epi32(fx);
  const __m256i n1 = _mm256_srai_epi32(n, 1), n2 = _mm256_sub_epi32(n, n1);
  auto pow2 = [](__m256i e) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23)); };
  return _mm256_mul_ps(_mm256_mul_ps(y, pow2(n1)), pow2(n2));
}

// tanh(x) = 1 - 2 / (exp(2x) + 1): saturates to +-1 where exp8 clamps.
inline __m256 tanh8(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e = exp8(_mm256_add_ps(x, x));
  return _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
}

bool tile_fits(int head_dim, int v_dim) {
  auto fits = [](int d) { return d % 8 == 0 && d > 0 && d <= kMaxHeadDim; };
  return fits(head_dim) && fits(v_dim);
}

// Rows r0..r0+7 of the tile (those < tile.rows).
void attend_rows(const PagedKvLayerView& kv, const AttentionTile& tile, int r0, int hd, int vd, float scale,
                 float softcap, int32_t p0, int32_t p1, float* out, float* m_out, float* l_out) {
  alignas(32) float qt[kMaxHeadDim][kLanes];  // scaled queries, transposed: qt[d] = dimension d of every row
  alignas(32) float ot[kMaxHeadDim][kLanes];  // the weighted values, transposed
  alignas(32) float pj[kLanes][kLanes];       // one chunk's probabilities: pj[j] = position j for every row
  alignas(32) int32_t lim[kLanes], fst[kLanes];
  const int rows = std::min(kLanes, tile.rows - r0);
  int32_t end = p0;
  for (int r = 0; r < kLanes; r++) {
    // Unused lanes repeat the pass's first query with no positions: harmless, discarded.
    const float* q = tile.q[r0 + (r < rows ? r : 0)];
    for (int d = 0; d < hd; d++) qt[d][r] = q[d] * scale;
    lim[r] = r < rows ? std::min(tile.limit[r0 + r], p1) : 0;
    fst[r] = r < rows ? tile.first[r0 + r] : 0;
    end = std::max(end, lim[r]);
  }
  for (int d = 0; d < vd; d++) _mm256_store_ps(ot[d], _mm256_setzero_ps());
  const __m256i limits = _mm256_load_si256(reinterpret_cast<const __m256i*>(lim));
  const __m256i firsts = _mm256_load_si256(reinterpret_cast<const __m256i*>(fst));
  const bool capped = softcap > 0.0f;
  const __m256 cap = _mm256_set1_ps(softcap), inv_cap = _mm256_set1_ps(capped ? 1.0f / softcap : 0.0f);
  const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 m = neg_inf, l = _mm256_setzero_ps();
  const int64_t k_off = static_cast<int64_t>(tile.kv_head) * hd, v_off = static_cast<int64_t>(tile.kv_head) * vd;
  const bool dequant = kv.k_format.type() != KvType::F32 || kv.v_format.type() != KvType::F32;
  alignas(32) float kq[kLanes][kMaxHeadDim];
  alignas(32) float vq[kLanes][kMaxHeadDim];

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
    // Scores of 8 positions for all rows: s[j] lane r = q_r . k_j.
    __m256 s[kLanes];
    for (int j = 0; j < kLanes; j++) s[j] = _mm256_setzero_ps();
    for (int d0 = 0; d0 < hd; d0 += 4) {
      __m256 qv[4];
      for (int i = 0; i < 4; i++) qv[i] = _mm256_load_ps(qt[d0 + i]);
      for (int j = 0; j < kLanes; j++)
        for (int i = 0; i < 4; i++) s[j] = _mm256_fmadd_ps(qv[i], _mm256_broadcast_ss(kr[j] + d0 + i), s[j]);
    }
    if (capped)
      for (int j = 0; j < n; j++) s[j] = _mm256_mul_ps(cap, tanh8(_mm256_mul_ps(s[j], inv_cap)));
    // Causal, window and range mask, then the online softmax, lane by lane.
    __m256 valid[kLanes];
    __m256 block_max = m;
    for (int j = 0; j < kLanes; j++) {
      const __m256i pos = _mm256_set1_epi32(p + j);
      const __m256i ok = _mm256_andnot_si256(_mm256_cmpgt_epi32(firsts, pos), _mm256_cmpgt_epi32(limits, pos));
      valid[j] = j < n ? _mm256_castsi256_ps(ok) : _mm256_setzero_ps();
      s[j] = _mm256_blendv_ps(neg_inf, s[j], valid[j]);
      block_max = _mm256_max_ps(block_max, s[j]);
    }
    // Rows with nothing yet keep m = -inf: their correction is 1, not exp(nan).
    const __m256 live = _mm256_cmp_ps(block_max, neg_inf, _CMP_NEQ_OQ);
    const __m256 corr = _mm256_blendv_ps(_mm256_set1_ps(1.0f), exp8(_mm256_sub_ps(m, block_max)), live);
    l = _mm256_mul_ps(l, corr);
    for (int j = 0; j < n; j++) {
      const __m256 e = _mm256_and_ps(valid[j], exp8(_mm256_sub_ps(s[j], block_max)));
      l = _mm256_add_ps(l, e);
      _mm256_store_ps(pj[j], e);
    }
    m = _mm256_blendv_ps(m, block_max, live);
    // ot[d] = ot[d] * corr + sum_j pj[j] * v_j[d], 8 dimensions at a time.
    for (int d0 = 0; d0 < vd; d0 += 8) {
      __m256 acc[8];
      for (int i = 0; i < 8; i++) acc[i] = _mm256_mul_ps(_mm256_load_ps(ot[d0 + i]), corr);
      for (int j = 0; j < n; j++) {
        const __m256 w = _mm256_load_ps(pj[j]);
        for (int i = 0; i < 8; i++) acc[i] = _mm256_fmadd_ps(w, _mm256_broadcast_ss(vr[j] + d0 + i), acc[i]);
      }
      for (int i = 0; i < 8; i++) _mm256_store_ps(ot[d0 + i], acc[i]);
    }
  }

  alignas(32) float ms[kLanes], ls[kLanes];
  _mm256_store_ps(ms, m);
  _mm256_store_ps(ls, l);
  for (int r = 0; r < rows; r++) {
    const int64_t row = tile.out_row[r0 + r];
    float* o = out + row * vd;
    for (int d = 0; d < vd; d++) o[d] = ot[d][r];
    m_out[row] = ms[r];
    l_out[row] = ls[r];
  }
}

void attend_tile(const PagedKvLayerView& kv, const AttentionTile& tile, int hd, int vd, float scale, float softcap,
                 int32_t p0, int32_t p1, float* out, float* m_out, float* l_out) {
  for (int r0 = 0; r0 < tile.rows; r0 += kLanes)
    attend_rows(kv, tile, r0, hd, vd, scale, softcap, p0, p1, out, m_out, l_out);
}

}  // namespace

const AttentionTiles& avx2_attention_tiles() {
  static const AttentionTiles t{"avx2", tile_fits, attend_tile};
  return t;
}

}  // namespace kestrel

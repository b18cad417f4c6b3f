#include "ops/lightning_indexer.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "kernels/dot.h"
#include "kernels/gemm_float.h"

namespace kestrel {

namespace {

double score_with(const DotKernels& dk, const float* q, const float* w, const float* k, const IndexerShape& s) {
  double acc = 0.0;
  for (int h = 0; h < s.n_head; h++) {
    const float d = dk.dot_f32(q + int64_t{h} * s.head_dim, k, s.head_dim);
    acc += static_cast<double>(std::max(d, 0.0f) * w[h]);  // relu, then the weight, rounded as ggml_mul does
  }
  return acc;
}

// Scores of positions [j0, j1) of one row's sequence: the keys of a chunk of positions gathered as floats,
// every head's q.k of them in one small GEMM (the float tiles: heads x positions; row dots where the ISA
// has no tiles), then relu, the head weights, the sum.
void score_range(const DotKernels& dk, const PagedKvLayerView& keys, const int32_t* table, const float* q,
                 const float* w, const IndexerShape& s, int32_t j0, int32_t j1, float* scores) {
  constexpr int32_t kChunk = 64;
  const int64_t hd = s.head_dim;
  thread_local std::vector<float> kbuf, dots;
  kbuf.resize(static_cast<size_t>(kChunk * hd));
  dots.resize(static_cast<size_t>(kChunk) * s.n_head);
  const FloatTiles* tiles = float_tiles();
  const bool in_place = keys.k_format.type() == KvType::F32;  // float rows read where they lie
  for (int32_t j = j0, c = 0; j < j1; j += c) {
    // Up to kChunk positions of one KV block.
    c = std::min({kChunk, j1 - j, keys.block_size - j % keys.block_size});
    const int64_t slot0 = keys.slot(table, j);
    const float* kp = kbuf.data();
    size_t stride = static_cast<size_t>(hd) * 4;
    if (in_place) {
      kp = reinterpret_cast<const float*>(keys.k_row(slot0));
      stride = static_cast<size_t>(keys.k_stride);
    } else {
      for (int32_t i = 0; i < c; i++) keys.k_format.dequantize(keys.k_row(slot0 + i), 0, kbuf.data() + i * hd, hd);
    }
    if (tiles) {
      tiles->gemm(GgmlType::F32, reinterpret_cast<const uint8_t*>(kp), stride, hd, 0, c, q, s.n_head, dots.data(), c,
                  s.n_head);
    } else {
      for (int h = 0; h < s.n_head; h++)
        for (int32_t i = 0; i < c; i++)
          dots[h * c + i] = dk.dot_f32(q + h * hd, reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(kp) + i * stride), hd);
    }
    // relu, weight, sum over the heads in head order (branch-free: half the dots are negative).
    double acc[kChunk] = {};
    for (int h = 0; h < s.n_head; h++) {
      const float* dh = dots.data() + h * c;
      const float wh = w[h];
      for (int32_t i = 0; i < c; i++) acc[i] += static_cast<double>(std::max(dh[i], 0.0f) * wh);
    }
    for (int32_t i = 0; i < c; i++) scores[j + i] = static_cast<float>(acc[i]);
  }
}

// The top_k positions of scores[0, len), ascending.
void select_top_k(const float* scores, int32_t len, int top_k, std::vector<int32_t>& idx, int32_t* out) {
  idx.resize(static_cast<size_t>(len));
  std::iota(idx.begin(), idx.end(), 0);
  const auto better = [scores](int32_t a, int32_t b) { return scores[a] > scores[b] || (scores[a] == scores[b] && a < b); };
  std::nth_element(idx.begin(), idx.begin() + top_k, idx.end(), better);
  std::sort(idx.begin(), idx.begin() + top_k);
  std::copy(idx.begin(), idx.begin() + top_k, out);
}

}  // namespace

double lightning_indexer_score(const float* q, const float* w, const float* k, const IndexerShape& s) {
  return score_with(dot_kernels(), q, w, k, s);
}

void lightning_indexer_top_k(ThreadPool* pool, const PagedKvLayerView& keys, const IndexerBatch& b,
                             const IndexerShape& s, int32_t* selected, int32_t* counts) {
  const DotKernels& dk = dot_kernels();
  const int64_t qw = int64_t{s.n_head} * s.head_dim;
  std::vector<int64_t> scored;  // rows past top_k positions
  for (int64_t t = 0; t < b.n_tokens; t++) {
    const int32_t len = b.positions[t] + 1;
    int32_t* out = selected + t * s.top_k;
    if (len <= s.top_k) {
      std::iota(out, out + len, 0);
      counts[t] = len;
    } else {
      counts[t] = s.top_k;
      scored.push_back(t);
    }
  }
  if (scored.empty()) return;
  const int threads = pool ? pool->size() : 1;
  const auto n_scored = static_cast<int64_t>(scored.size());
  if (n_scored >= threads) {
    // Enough rows for every thread (prefill): a row per thread at a time.
    const auto rows = [&](int64_t r0, int64_t r1) {
      std::vector<float> scores;
      std::vector<int32_t> idx;
      for (int64_t r = r0; r < r1; r++) {
        const int64_t t = scored[r];
        const int32_t len = b.positions[t] + 1;
        scores.resize(static_cast<size_t>(len));
        score_range(dk, keys, b.block_tables[t], b.q + t * qw, b.w + t * s.n_head, s, 0, len, scores.data());
        select_top_k(scores.data(), len, s.top_k, idx, selected + t * s.top_k);
      }
    };
    if (pool)
      pool->parallel_for(n_scored, rows);
    else
      rows(0, n_scored);
    return;
  }
  // Few rows (decode): each row's positions split across the threads.
  std::vector<float> scores;
  std::vector<int32_t> idx;
  for (const int64_t t : scored) {
    const int32_t len = b.positions[t] + 1;
    scores.resize(static_cast<size_t>(len));
    pool->parallel_for(len, [&](int64_t j0, int64_t j1) {
      score_range(dk, keys, b.block_tables[t], b.q + t * qw, b.w + t * s.n_head, s, static_cast<int32_t>(j0),
                  static_cast<int32_t>(j1), scores.data());
    });
    select_top_k(scores.data(), len, s.top_k, idx, selected + t * s.top_k);
  }
}

namespace ops {
namespace {
void run_host(const OpContext& c, const IndexerTopKArgs& a) {
  const AttentionRows& r = a.rows;
  lightning_indexer_top_k(&c.pool(), a.keys,
                          {r.n_tokens, OpContext::host(r.q), OpContext::host(a.w), r.positions, r.block_tables},
                          a.shape, a.selected, a.counts);
}
// Rows past top_k score every earlier position.
OpCost cost(const IndexerTopKArgs& a) {
  double scored = 0;
  for (int64_t t = 0; t < a.rows.n_tokens; t++)
    if (a.rows.positions[t] + 1 > a.shape.top_k) scored += a.rows.positions[t] + 1;
  return {scored * static_cast<double>(a.keys.k_stride), 2.0 * scored * a.shape.n_head * a.shape.head_dim};
}
}  // namespace

const Op<IndexerTopKArgs> indexer_top_k("indexer_top_k", run_host, cost);

}  // namespace ops
}  // namespace kestrel

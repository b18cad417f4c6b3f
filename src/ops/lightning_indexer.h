#pragma once
// DeepSeek Sparse Attention's lightning indexer (DeepSeek-V3.2, model/mla_attention.h): which earlier
// positions each query attends to. For query row t at position p of its sequence, over positions j <= p:
//   score(j) = sum_h relu(q[t][h] . k_j) * w[t][h]
// q [n][n_head][head_dim] and w [n][n_head] (already scaled) are the indexer's query heads and weights, k_j
// the sequence's cached indexer key at j (one head_dim row per position, in keys.k_format). The query keeps
// the top_k positions by score, listed ascending; an exact tie at the boundary goes to the earlier position
// (llama.cpp's ggml_top_k leaves the order of ties unspecified). Rows at p < top_k keep every position and
// are not scored: selection only bites past top_k positions.
#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/attention.h"
#include "backend/operator.h"

namespace kestrel {

struct IndexerBatch {
  int64_t n_tokens = 0;
  const float* q = nullptr;  // [n_tokens][n_head * head_dim]
  const float* w = nullptr;  // [n_tokens][n_head]
  const int32_t* positions = nullptr;
  const int32_t* const* block_tables = nullptr;  // per token: its sequence's table
};

struct IndexerShape {
  int n_head = 0, head_dim = 0, top_k = 0;
};

// selected[t * top_k ...]: row t's positions, ascending; counts[t] = min(top_k, positions[t] + 1) of them.
// pool may be null (one thread).
void lightning_indexer_top_k(ThreadPool* pool, const PagedKvLayerView& keys, const IndexerBatch& b,
                             const IndexerShape& s, int32_t* selected, int32_t* counts);

// The score of one position (the definition above, summed over heads in double): what the tests check the
// selection against, and what the kernel computes per position.
double lightning_indexer_score(const float* q, const float* w, const float* k, const IndexerShape& s);

namespace ops {
// The indexer as a named operator (backend/operator.h) over the key rows of `keys`: rows.q the indexer
// queries, w their head weights; the selections come back to the host.
struct IndexerTopKArgs {
  PagedKvLayerView keys;
  AttentionRows rows;
  Act w;
  IndexerShape shape;
  int32_t* selected = nullptr;
  int32_t* counts = nullptr;
};
extern const Op<IndexerTopKArgs> indexer_top_k;
}  // namespace ops

}  // namespace kestrel

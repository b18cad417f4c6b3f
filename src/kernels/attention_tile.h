#pragma once
// The attention micro-kernel (AVX-512; AVX2 in two 8-lane passes): up to 16 query rows that read the same
// KV head of the same sequence (a token's query heads of one GQA group, and
// neighbouring tokens), one row per vector lane. Queries are transposed once
// per tile, so scores for 16 rows come from FMAs against broadcast key
// elements, and the online softmax (max, exp, sum, rescale) runs lane-wise
// with no horizontal reductions; values accumulate the same way.
#include <cstdint>

#include "hw/cpu_features.h"
#include "kernels/attention.h"

namespace kestrel {

struct AttentionTile {
  static constexpr int kMaxRows = 16;
  int rows = 0;
  int kv_head = 0;
  const int32_t* table = nullptr;  // the sequence's block table
  const float* q[kMaxRows];        // head_dim floats each
  int32_t first[kMaxRows];         // row r attends to positions >= first[r]
  int32_t limit[kMaxRows];         // ... and < limit[r]
  int64_t out_row[kMaxRows];       // where the row's results go (caller's index)
};

struct AttentionTiles {
  const char* isa;
  // Whether the tile kernel takes heads of these key and value sizes (else the per-row kernel runs).
  bool (*fits)(int head_dim, int v_dim);
  // Online softmax of every row over positions [max(p0, first), min(p1, limit)),
  // scores soft-capped when softcap > 0 (cap * tanh(score / cap)): writes the
  // unnormalised weighted values to out + out_row[r] * v_dim, the running
  // max to m[out_row[r]] and the sum of exponentials to l[out_row[r]]. A row
  // with no positions in range gets m = -inf, l = 0 and zeros.
  void (*attend)(const PagedKvLayerView& kv, const AttentionTile& tile, int head_dim, int v_dim, float scale,
                 float softcap, int32_t p0, int32_t p1, float* out, float* m, float* l);
};
// The tile kernel of this ISA level when compiled in and the CPU runs it (isa_dispatch.h): AVX-512's
// (16 rows a pass), else AVX2's (two passes of 8 rows), else null.
const AttentionTiles* attention_tiles(IsaLevel isa = selected_isa());
// attention_paged with a given tile table (tests and benchmarks compare levels); per row where it does not fit.
void attention_paged_tiles(ThreadPool& pool, const PagedKvLayerView& kv, const AttentionBatch& batch,
                           const AttentionShape& shape, const AttentionTiles& tiles);

}  // namespace kestrel

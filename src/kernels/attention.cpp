#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/attention_tile.h"
#include "kernels/dot.h"
#include "kernels/isa_dispatch.h"

namespace kestrel {

const AttentionTiles& avx512_attention_tiles();  // kernels/x86/attention_avx512.cpp
const AttentionTiles& avx2_attention_tiles();    // kernels/x86/attention_avx2.cpp

const AttentionTiles* attention_tiles(IsaLevel isa) {
  if (const auto* t = single_table<AttentionTiles>(IsaNeed::Avx512, isa, KESTREL_SIMD_TABLE(avx512_attention_tiles)))
    return t;
  return single_table<AttentionTiles>(IsaNeed::Avx2, isa, KESTREL_SIMD_TABLE(avx2_attention_tiles));
}

namespace {

// Online-softmax state of one (token, head) over a range of positions.
struct Partial {
  float m;  // running max score
  float l;  // sum of exp(score - m)
};

// Streams positions [p0, p1) of one token/head into out[0..hd) (unnormalised),
// a KV block at a time: the scores of the block, one softmax rescale, then
// the weighted values. Dots and axpys use the process's SIMD kernels.
Partial attend_range(const DotKernels& k, const PagedKvLayerView& kv, const int32_t* table, const float* q, int kvh,
                     int hd, int vd, float scale, float softcap, int32_t p0, int32_t p1, float* out) {
  for (int d = 0; d < vd; d++) out[d] = 0.0f;
  // Dequantized key / value of one position (unused for f32 rows).
  thread_local std::vector<float> kbuf, vbuf;
  kbuf.resize(static_cast<size_t>(hd));
  vbuf.resize(static_cast<size_t>(vd));
  Partial s{-std::numeric_limits<float>::infinity(), 0.0f};
  constexpr int kMaxBlock = 256;
  float scores[kMaxBlock];
  for (int32_t p = p0; p < p1;) {
    // Positions [p, end) share one KV block (and at most kMaxBlock of them).
    const int32_t in_block = kv.block_size - p % kv.block_size;
    const int32_t end = std::min({p1, p + in_block, p + kMaxBlock});
    const int64_t slot0 = kv.slot(table, p);
    float block_max = -std::numeric_limits<float>::infinity();
    for (int32_t j = 0; j < end - p; j++) {
      scores[j] = k.dot_f32(q, kv.k_format.read(kv.k_row(slot0 + j), int64_t{kvh} * hd, kbuf.data(), hd), hd) * scale;
      if (softcap > 0.0f) scores[j] = softcap * std::tanh(scores[j] / softcap);
      block_max = std::max(block_max, scores[j]);
    }
    if (block_max > s.m) {
      // New maximum: rescale what was accumulated so far.
      const float correction = std::exp(s.m - block_max);
      s.l *= correction;
      for (int d = 0; d < vd; d++) out[d] *= correction;
      s.m = block_max;
    }
    s.l += k.exp_sum_f32(scores, s.m, end - p);
    for (int32_t j = 0; j < end - p; j++)
      k.axpy_f32(out, scores[j], kv.v_format.read(kv.v_row(slot0 + j), int64_t{kvh} * vd, vbuf.data(), vd), vd);
    p = end;
  }
  return s;
}

// The softmax denominator of a row whose scores' max is m and sum of exp(score - m) is l, with the head's
// sink logit (if any) joining it.
float denominator(const AttentionShape& s, int head, float m, float l) {
  return s.sinks ? l + std::exp(s.sinks[head] - m) : l;
}

// Minimum positions per split, so that splitting pays for its merge.
constexpr int32_t kMinSplitLength = 128;

// Groups the batch's (token, head) rows into tiles: the heads of one KV
// group (up to 16) times as many neighbouring tokens of the same sequence as
// fill 16 rows. Row index = token * n_head + head.
void build_tiles(const AttentionBatch& b, const AttentionShape& s, std::vector<AttentionTile>& tiles) {
  constexpr int kRows = AttentionTile::kMaxRows;
  const int group = s.n_head / s.n_kv_head;
  const int heads_per_tile = std::min(group, kRows);
  const int64_t tokens_per_tile = std::max(1, kRows / heads_per_tile);
  tiles.clear();
  for (int64_t t0 = 0; t0 < b.n_tokens;) {
    int64_t t1 = t0 + 1;
    while (t1 < b.n_tokens && t1 - t0 < tokens_per_tile && b.block_tables[t1] == b.block_tables[t0]) t1++;
    for (int kvh = 0; kvh < s.n_kv_head; kvh++)
      for (int h0 = kvh * group; h0 < (kvh + 1) * group; h0 += heads_per_tile) {
        AttentionTile tile;
        tile.kv_head = kvh;
        tile.table = b.block_tables[t0];
        for (int64_t t = t0; t < t1; t++)
          for (int h = h0; h < std::min(h0 + heads_per_tile, (kvh + 1) * group); h++) {
            tile.q[tile.rows] = b.q + (t * s.n_head + h) * s.head_dim;
            tile.first[tile.rows] = s.first_position(b.positions[t]);
            tile.limit[tile.rows] = b.last(t) + 1;
            tile.out_row[tile.rows] = t * s.n_head + h;
            tile.rows++;
          }
        tiles.push_back(tile);
      }
    t0 = t1;
  }
}

// Combines the partial softmaxes of every row's splits into b.out.
void merge_splits(ThreadPool& pool, const AttentionBatch& b, const AttentionShape& s, int64_t rows, int64_t splits,
                  int vd, const float* acc, const float* ms, const float* ls) {
  pool.parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; row++) {
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t c = 0; c < splits; c++) m = std::max(m, ms[row * splits + c]);
      float* out = b.out + row * vd;
      for (int d = 0; d < vd; d++) out[d] = 0.0f;
      float l = 0.0f;
      for (int64_t c = 0; c < splits; c++) {
        const int64_t i = row * splits + c;
        if (ls[i] == 0.0f) continue;  // an empty chunk
        const float w = std::exp(ms[i] - m);
        l += ls[i] * w;
        const float* a = acc + i * vd;
        for (int d = 0; d < vd; d++) out[d] += w * a[d];
      }
      const float inv = 1.0f / denominator(s, static_cast<int>(row % s.n_head), m, l);
      for (int d = 0; d < vd; d++) out[d] *= inv;
    }
  });
}

void attention_tiled(ThreadPool& pool, const PagedKvLayerView& kv, const AttentionBatch& b, const AttentionShape& s, const AttentionTiles& kernel) {
  // Grown once and reused: the decode loop allocates nothing after warm-up.
  thread_local std::vector<AttentionTile> tiles;
  thread_local std::vector<float> acc, ms, ls;
  build_tiles(b, s, tiles);
  const int hd = s.head_dim, vd = s.value_dim();
  const int64_t rows = b.n_tokens * s.n_head, n_tiles = static_cast<int64_t>(tiles.size());
  int32_t longest = 0;
  for (int64_t t = 0; t < b.n_tokens; t++)
    longest = std::max(longest, b.last(t) + 1 - s.first_position(b.positions[t]));
  // Few tiles for the threads (decode): split positions and merge after.
  int64_t splits = 1;
  if (n_tiles < 4 * pool.size())
    splits = std::min<int64_t>((4 * pool.size() + n_tiles - 1) / n_tiles, std::max(1, longest / kMinSplitLength));
  ms.resize(static_cast<size_t>(rows * splits));
  ls.resize(ms.size());
  if (splits > 1) acc.resize(static_cast<size_t>(rows * splits * vd));
  float* out = splits > 1 ? acc.data() : b.out;
  float *m = ms.data(), *l = ls.data();
  const AttentionTile* tile_data = tiles.data();  // thread_locals: the workers must not name them
  // Tiles are dealt out round-robin: a tile's cost grows with its position,
  // so contiguous ranges would give the last thread the longest prefixes.
  pool.run([&](int ti, int nt) {
    for (int64_t w = ti; w < n_tiles * splits; w += nt) {
      AttentionTile tile = tile_data[w / splits];
      const int64_t c = w % splits;
      // The tile's positions [start, end), split evenly.
      int32_t start = tile.first[0], end = 0;
      for (int r = 0; r < tile.rows; r++) start = std::min(start, tile.first[r]), end = std::max(end, tile.limit[r]);
      const int32_t len = end - start;
      const auto p0 = start + static_cast<int32_t>(len * c / splits), p1 = start + static_cast<int32_t>(len * (c + 1) / splits);
      for (int r = 0; r < tile.rows; r++) tile.out_row[r] = tile.out_row[r] * splits + c;
      kernel.attend(kv, tile, hd, vd, s.scale, s.softcap, p0, c + 1 == splits ? end : p1, out, m, l);
      if (splits > 1) continue;
      for (int r = 0; r < tile.rows; r++) {
        float* o = out + tile.out_row[r] * vd;
        const int64_t row = tile.out_row[r];
        const float inv = 1.0f / denominator(s, static_cast<int>(row % s.n_head), m[row], l[row]);
        for (int d = 0; d < vd; d++) o[d] *= inv;
      }
    }
  });
  if (splits > 1) merge_splits(pool, b, s, rows, splits, vd, acc.data(), m, l);
}

void attention_per_row(ThreadPool& pool, const PagedKvLayerView& kv, const AttentionBatch& b, const AttentionShape& s) {
  const DotKernels& k = dot_kernels();
  const int group = s.n_head / s.n_kv_head;
  const int hd = s.head_dim, vd = s.value_dim();
  const int64_t rows = b.n_tokens * s.n_head;
  int32_t longest = 0;
  for (int64_t t = 0; t < b.n_tokens; t++)
    longest = std::max(longest, b.last(t) + 1 - s.first_position(b.positions[t]));
  // Few (token, head) rows for the threads (decode of few heads, e.g. MLA):
  // split each row's positions into chunks and merge the partial softmaxes.
  int64_t splits = 1;
  if (rows < 4 * pool.size())
    splits = std::min<int64_t>((4 * pool.size() + rows - 1) / rows, std::max(1, longest / kMinSplitLength));

  if (splits == 1) {
    pool.run([&](int ti, int nt) {
      for (int64_t w = ti; w < rows; w += nt) {
        const int64_t t = w / s.n_head;
        const int h = static_cast<int>(w % s.n_head);
        float* out = b.out + (t * s.n_head + h) * vd;
        const Partial p = attend_range(k, kv, b.block_tables[t], b.q + (t * s.n_head + h) * hd, h / group, hd, vd,
                                       s.scale, s.softcap, s.first_position(b.positions[t]), b.last(t) + 1, out);
        const float inv = 1.0f / denominator(s, h, p.m, p.l);
        for (int d = 0; d < vd; d++) out[d] *= inv;
      }
    });
    return;
  }

  thread_local std::vector<float> acc, ms, ls;
  acc.resize(static_cast<size_t>(rows * splits * vd));
  ms.resize(static_cast<size_t>(rows * splits));
  ls.resize(ms.size());
  // thread_locals: the workers must not name them.
  float *acc_data = acc.data(), *m = ms.data(), *l = ls.data();
  pool.parallel_for(rows * splits, [&](int64_t w0, int64_t w1) {
    for (int64_t w = w0; w < w1; w++) {
      const int64_t row = w / splits, c = w % splits;
      const int64_t t = row / s.n_head;
      const int h = static_cast<int>(row % s.n_head);
      const int32_t start = s.first_position(b.positions[t]);
      const int64_t len = b.last(t) + 1 - start;
      const auto p0 = start + static_cast<int32_t>(len * c / splits), p1 = start + static_cast<int32_t>(len * (c + 1) / splits);
      const Partial p = attend_range(k, kv, b.block_tables[t], b.q + (t * s.n_head + h) * hd, h / group, hd, vd,
                                     s.scale, s.softcap, p0, p1, acc_data + w * vd);
      m[w] = p.m;
      l[w] = p.l;
    }
  });
  merge_splits(pool, b, s, rows, splits, vd, acc_data, m, l);
}

}  // namespace

void attention_paged_tiles(ThreadPool& pool, const PagedKvLayerView& kv, const AttentionBatch& b,
                           const AttentionShape& s, const AttentionTiles& tiles) {
  if (tiles.fits(s.head_dim, s.value_dim())) attention_tiled(pool, kv, b, s, tiles);
  else attention_per_row(pool, kv, b, s);
}

void attention_paged(ThreadPool& pool, const PagedKvLayerView& kv, const AttentionBatch& b, const AttentionShape& s,
                     AttentionKernel kernel) {
  static const AttentionTiles* const tiles = attention_tiles();  // chosen once (isa_dispatch.h)
  // Head sizes the widest tiles do not take (SigLIP's 72: a multiple of 8, not 16) take the AVX2 tiles.
  static const AttentionTiles* const narrow =
      selected_isa() > IsaLevel::Avx2 ? attention_tiles(IsaLevel::Avx2) : nullptr;
  if (kernel == AttentionKernel::Best && tiles && tiles->fits(s.head_dim, s.value_dim()))
    attention_tiled(pool, kv, b, s, *tiles);
  else if (kernel == AttentionKernel::Best && narrow && narrow->fits(s.head_dim, s.value_dim()))
    attention_tiled(pool, kv, b, s, *narrow);
  else
    attention_per_row(pool, kv, b, s);
}

}  // namespace kestrel

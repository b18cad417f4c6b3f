#include "kernels/attention.h"

#include "kernels/dot.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace kestrel {
namespace {

// Online-softmax state of one (token, head) over a range of positions.
struct Partial {
  float m;   // running max score
  float l;   // sum of exp(score - m)
};

// Streams positions [p0, p1) of one token/head into out[0..hd) (unnormalised),
// a KV block at a time: the scores of the block, one softmax rescale, then
// the weighted values. Dots and axpys use the process's SIMD kernels.
Partial attend_range(const DotKernels& k, const PagedKvLayerView& kv, const int32_t* table, const float* q, int kvh,
                     int hd, float scale, int32_t p0, int32_t p1, float* out) {
  for (int d = 0; d < hd; d++) out[d] = 0.0f;
  Partial s{-std::numeric_limits<float>::infinity(), 0.0f};
  constexpr int kMaxBlock = 256;
  float scores[kMaxBlock];
  for (int32_t p = p0; p < p1;) {
    // Positions [p, end) share one KV block (and at most kMaxBlock of them).
    const int32_t in_block = kv.block_size - p % kv.block_size;
    const int32_t end = std::min({p1, p + in_block, p + kMaxBlock});
    const int64_t slot0 = static_cast<int64_t>(table[p / kv.block_size]) * kv.block_size + p % kv.block_size;
    float block_max = -std::numeric_limits<float>::infinity();
    for (int32_t j = 0; j < end - p; j++) {
      scores[j] = k.dot_f32(q, kv.k + (slot0 + j) * kv.k_stride + kvh * hd, hd) * scale;
      block_max = std::max(block_max, scores[j]);
    }
    if (block_max > s.m) {
      // New maximum: rescale what was accumulated so far.
      const float correction = std::exp(s.m - block_max);
      s.l *= correction;
      for (int d = 0; d < hd; d++) out[d] *= correction;
      s.m = block_max;
    }
    s.l += k.exp_sum_f32(scores, s.m, end - p);
    for (int32_t j = 0; j < end - p; j++) k.axpy_f32(out, scores[j], kv.v + (slot0 + j) * kv.v_stride + kvh * hd, hd);
    p = end;
  }
  return s;
}

// Minimum positions per split, so that splitting pays for its merge.
constexpr int32_t kMinSplitLength = 128;

}  // namespace

void attention_paged(ThreadPool& pool, const PagedKvLayerView& kv, const AttentionBatch& b, const AttentionShape& s) {
  const DotKernels& k = dot_kernels();
  const int group = s.n_head / s.n_kv_head;
  const int hd = s.head_dim;
  const int64_t rows = b.n_tokens * s.n_head;
  int32_t longest = 0;
  for (int64_t t = 0; t < b.n_tokens; t++) longest = std::max(longest, b.positions[t] + 1);
  // Few (token, head) rows for the threads (decode of few heads, e.g. MLA):
  // split each row's positions into chunks and merge the partial softmaxes.
  int64_t splits = 1;
  if (rows < 4 * pool.size()) {
    splits = std::min<int64_t>((4 * pool.size() + rows - 1) / rows, std::max(1, longest / kMinSplitLength));
  }

  if (splits == 1) {
    // Rows are dealt out round-robin: a row's cost grows with its position, so
    // contiguous ranges would give the last thread the longest prefixes.
    pool.run([&](int ti, int nt) {
      for (int64_t w = ti; w < rows; w += nt) {
        const int64_t t = w / s.n_head;
        const int h = static_cast<int>(w % s.n_head);
        float* out = b.out + (t * s.n_head + h) * hd;
        const Partial p = attend_range(k, kv, b.block_tables[t], b.q + (t * s.n_head + h) * hd, h / group, hd, s.scale, 0,
                                       b.positions[t] + 1, out);
        const float inv = 1.0f / p.l;
        for (int d = 0; d < hd; d++) out[d] *= inv;
      }
    });
    return;
  }

  // Split: partial results per (row, chunk), then one merge per row.
  thread_local std::vector<float> acc;
  thread_local std::vector<Partial> parts;
  acc.resize(static_cast<size_t>(rows * splits * hd));
  parts.resize(static_cast<size_t>(rows * splits));
  float* acc_data = acc.data();
  Partial* part_data = parts.data();
  pool.parallel_for(rows * splits, [&](int64_t w0, int64_t w1) {
    for (int64_t w = w0; w < w1; w++) {
      const int64_t row = w / splits, c = w % splits;
      const int64_t t = row / s.n_head;
      const int h = static_cast<int>(row % s.n_head);
      const int64_t len = b.positions[t] + 1;
      const auto p0 = static_cast<int32_t>(len * c / splits), p1 = static_cast<int32_t>(len * (c + 1) / splits);
      part_data[w] = attend_range(k, kv, b.block_tables[t], b.q + (t * s.n_head + h) * hd, h / group, hd, s.scale, p0, p1,
                                  acc_data + w * hd);
    }
  });
  pool.parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; row++) {
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t c = 0; c < splits; c++) m = std::max(m, part_data[row * splits + c].m);
      float* out = b.out + row * hd;
      for (int d = 0; d < hd; d++) out[d] = 0.0f;
      float l = 0.0f;
      for (int64_t c = 0; c < splits; c++) {
        const Partial& p = part_data[row * splits + c];
        if (p.l == 0.0f) continue;  // an empty chunk
        const float w = std::exp(p.m - m);
        l += p.l * w;
        const float* a = acc_data + (row * splits + c) * hd;
        for (int d = 0; d < hd; d++) out[d] += w * a[d];
      }
      const float inv = 1.0f / l;
      for (int d = 0; d < hd; d++) out[d] *= inv;
    }
  });
}

}  // namespace kestrel

#include "kernels/attention.h"

#include <cmath>
#include <limits>
#include <vector>

namespace kestrel {

void attention_paged(ThreadPool& pool, const PagedKvLayerView& kv, const AttentionBatch& b,
                     const AttentionShape& s) {
  const int group = s.n_head / s.n_kv_head;
  const int hd = s.head_dim;
  const int64_t work = b.n_tokens * s.n_head;
  pool.parallel_for(work, [&](int64_t w0, int64_t w1) {
    for (int64_t w = w0; w < w1; w++) {
      const int64_t t = w / s.n_head;
      const int h = static_cast<int>(w % s.n_head);
      const int kvh = h / group;
      const float* q = b.q + (t * s.n_head + h) * hd;
      float* out = b.out + (t * s.n_head + h) * hd;
      const int32_t* table = b.block_tables[t];
      for (int d = 0; d < hd; d++) out[d] = 0.0f;
      float m = -std::numeric_limits<float>::infinity();
      float l = 0.0f;
      for (int32_t p = 0; p <= b.positions[t]; p++) {
        const int64_t slot = static_cast<int64_t>(table[p / kv.block_size]) * kv.block_size + p % kv.block_size;
        const float* k = kv.k + slot * kv.k_stride + kvh * hd;
        float score = 0.0f;
        for (int d = 0; d < hd; d++) score += q[d] * k[d];
        score *= s.scale;
        const float* v = kv.v + slot * kv.v_stride + kvh * hd;
        if (score > m) {
          // New maximum: rescale what was accumulated so far.
          const float correction = std::exp(m - score);
          l *= correction;
          for (int d = 0; d < hd; d++) out[d] *= correction;
          m = score;
        }
        const float e = std::exp(score - m);
        l += e;
        for (int d = 0; d < hd; d++) out[d] += e * v[d];
      }
      const float inv = 1.0f / l;
      for (int d = 0; d < hd; d++) out[d] *= inv;
    }
  });
}

}  // namespace kestrel

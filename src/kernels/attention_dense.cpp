#include "kernels/attention_dense.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/gemm_float.h"
#include "kernels/dense_rows.h"

namespace kestrel {

bool attention_dense_gemm(ThreadPool& pool, const float* k, const float* v, int64_t k_width, int64_t v_width,
                          int64_t len, const AttentionBatch& b, const AttentionShape& s) {
  const FloatTiles* tiles = float_tiles();
  const DenseRows& rows_k = dense_rows_kernels();
  constexpr int64_t kBlock = 64;  // queries per work item
  if (!tiles || b.n_tokens < kBlock || s.window || s.chunk || s.softcap != 0.0f || s.sinks ||
      s.value_dim() != s.head_dim || s.n_kv_head <= 0 || s.n_head % s.n_kv_head != 0)
    return false;
  for (int64_t t = 0; t < b.n_tokens; t++)
    if (b.last(t) != len - 1) return false;
  const int hd = s.head_dim, group = s.n_head / s.n_kv_head;
  // Each KV head's keys and values transposed ([head][d][len]): the scores' outer-product blocks read a row of
  // keys per d; the second product's "weight" rows are the values'.
  // (The keys' rows padded with zeros to a whole block of scores: dense_rows.h.)
  thread_local std::vector<float> kt_buf, vt_buf;
  auto transposed = [&](std::vector<float>& buf, const float* src, int64_t width, int64_t ld) {
    buf.assign(static_cast<size_t>(s.n_kv_head) * hd * ld, 0.0f);
    float* out = buf.data();
    pool.parallel_for(static_cast<int64_t>(s.n_kv_head) * hd, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; r++) {
        const float* col = src + (r / hd) * hd + r % hd;
        for (int64_t j = 0; j < len; j++) out[r * ld + j] = col[j * width];
      }
    });
    return out;
  };
  const int64_t ldk = (len + kScoreBlock - 1) / kScoreBlock * kScoreBlock;
  const float* kt = transposed(kt_buf, k, k_width, ldk);
  const float* vt = transposed(vt_buf, v, v_width, len);
  const int64_t blocks = (b.n_tokens + kBlock - 1) / kBlock, items = blocks * s.n_head;
  const int64_t out_width = static_cast<int64_t>(s.n_head) * hd;
  pool.run([&](int ti, int nt) {
    std::vector<float> q(static_cast<size_t>(kBlock * hd)), p(static_cast<size_t>(kBlock * len));
    for (int64_t w = ti; w < items; w += nt) {
      const int h = static_cast<int>(w % s.n_head), kvh = h / group;
      const int64_t t0 = w / s.n_head * kBlock, n = std::min(kBlock, b.n_tokens - t0);
      for (int64_t t = 0; t < n; t++)
        std::memcpy(q.data() + t * hd, b.q + (t0 + t) * out_width + static_cast<int64_t>(h) * hd, sizeof(float) * hd);
      // p[t][j] = q_t . k_j
      rows_k.scores(q.data(), n, hd, kt + static_cast<int64_t>(kvh) * hd * ldk, ldk, len, p.data());
      rows_k.softmax(p.data(), n, len, s.scale);
      // out[t][h][d] = sum_j v_j[d] p[t][j]
      tiles->gemm(GgmlType::F32, reinterpret_cast<const uint8_t*>(vt + static_cast<int64_t>(kvh) * hd * len),
                  static_cast<size_t>(len) * sizeof(float), len, 0, hd, p.data(), n,
                  b.out + t0 * out_width + static_cast<int64_t>(h) * hd, out_width, n);
    }
  });
  return true;
}

}  // namespace kestrel

#include "ops/local_rel_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace kestrel {

namespace {

// Queries [q0, q1) of head h. ks: the scaled keys of this head (n x head_dim), qs a head_dim scratch.
void attend(const float* q, const float* ks, const float* v, const float* rel, float* out, const LocalRelAttentionShape& s,
            int64_t h, int64_t q0, int64_t q1, float* qs) {
  const int64_t hd = s.head_dim, w = s.heads * hd;
  const float inv_cap = 1.0f / s.softcap;
  float score[64];
  for (int64_t i = q0; i < q1; i++) {
    const float* qi = q + i * w + h * hd;
    for (int64_t d = 0; d < hd; d++) {
      const float x = qi[d] * s.q_scale;
      qs[d] = s.q_dim ? x * s.q_dim[d] : x;
    }
    const int64_t j0 = std::max<int64_t>(0, i - s.window + 1);
    float mx = -INFINITY;
    for (int64_t j = j0; j <= i; j++) {
      const float* kj = ks + j * hd;
      const float* r = rel + (s.past - (i - j)) * w + h * hd;
      float ac = 0, bd = 0;
      for (int64_t d = 0; d < hd; d++) ac += qs[d] * kj[d];
      for (int64_t d = 0; d < hd; d++) bd += qs[d] * r[d];
      float x = ac + bd;
      if (s.softcap > 0) x = std::tanh(x * inv_cap) * s.softcap;
      score[j - j0] = x;
      mx = std::max(mx, x);
    }
    double sum = 0;
    for (int64_t j = j0; j <= i; j++) {
      const float e = std::exp(score[j - j0] - mx);
      score[j - j0] = e;
      sum += e;
    }
    const float inv = static_cast<float>(1.0 / sum);
    float* o = out + i * w + h * hd;
    std::fill(o, o + hd, 0.0f);
    for (int64_t j = j0; j <= i; j++) {
      const float p = score[j - j0] * inv;
      const float* vj = v + j * w + h * hd;
      for (int64_t d = 0; d < hd; d++) o[d] += p * vj[d];
    }
  }
}

// The scaled keys of head h: (k * k_scale) * k_dim.
void scale_keys(const float* k, const LocalRelAttentionShape& s, int64_t h, float* ks) {
  const int64_t hd = s.head_dim, w = s.heads * hd;
  for (int64_t j = 0; j < s.n; j++)
    for (int64_t d = 0; d < hd; d++) {
      const float x = k[j * w + h * hd + d] * s.k_scale;
      ks[j * hd + d] = s.k_dim ? x * s.k_dim[d] : x;
    }
}

}  // namespace

void local_rel_attention_rows(const float* q, const float* k, const float* v, const float* rel, float* out,
                              const LocalRelAttentionShape& s) {
  std::vector<float> ks(static_cast<size_t>(s.n * s.head_dim)), qs(static_cast<size_t>(s.head_dim));
  for (int64_t h = 0; h < s.heads; h++) {
    scale_keys(k, s, h, ks.data());
    attend(q, ks.data(), v, rel, out, s, h, 0, s.n, qs.data());
  }
}

namespace ops {
namespace {

void run_host(const OpContext& c, const LocalRelAttentionArgs& a) {
  const LocalRelAttentionShape& s = a.shape;
  if (s.window < 1 || s.window > 64 || s.window > s.past + 1 || s.softcap < 0)
    throw Error("local_rel_attention: the window must be 1 to 64 keys, within past + 1");
  const float *q = OpContext::host(a.q), *k = OpContext::host(a.k), *v = OpContext::host(a.v), *rel = OpContext::host(a.rel);
  float* out = OpContext::host(a.out);
  std::vector<float> ks(static_cast<size_t>(s.heads * s.n * s.head_dim));
  c.pool().parallel_for(s.heads, [&](int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; h++) scale_keys(k, s, h, ks.data() + h * s.n * s.head_dim);
  });
  constexpr int64_t kQueries = 32;
  const int64_t blocks = (s.n + kQueries - 1) / kQueries;
  c.pool().parallel_for(s.heads * blocks, [&](int64_t t0, int64_t t1) {
    std::vector<float> qs(static_cast<size_t>(s.head_dim));
    for (int64_t t = t0; t < t1; t++) {
      const int64_t h = t / blocks, b = t % blocks;
      attend(q, ks.data() + h * s.n * s.head_dim, v, rel, out, s, h, b * kQueries, std::min(s.n, (b + 1) * kQueries),
             qs.data());
    }
  });
}

OpCost cost(const LocalRelAttentionArgs& a) {
  const LocalRelAttentionShape& s = a.shape;
  const double n = static_cast<double>(s.n), w = static_cast<double>(s.heads * s.head_dim);
  return {4.0 * 4.0 * n * w, 6.0 * n * w * static_cast<double>(s.window)};
}

}  // namespace

const Op<LocalRelAttentionArgs> local_rel_attention("local_rel_attention", run_host, cost);

}  // namespace ops
}  // namespace kestrel

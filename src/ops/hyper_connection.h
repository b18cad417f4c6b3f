#pragma once
// DeepSeek-V4's hyper-connections (model/arch/deepseek4.cpp): three named operators (backend/operator.h) over
// n rows, with the per-row references they are built from.
#include <cstdint>

#include "backend/operator.h"

namespace kestrel {

// DeepSeek-V4's hyper-connections (manifold-constrained: its hc_mult residual streams per token), as
// llama.cpp's deepseek4 graph computes them. From one token's mix logits m (the stream-mix projection of the
// RMS-normed streams, (2 + hc) * hc floats), scale[3] and base (as many floats as m):
//   pre[i]  = sigmoid(m[i] * scale[0] + base[i]) + eps                    (i < hc)
//   post[i] = 2 * sigmoid(m[hc + i] * scale[1] + base[hc + i])            (null: the output head's mix)
//   comb[dst + src * hc] = Sinkhorn(m[2hc + ..] * scale[2] + base[2hc + ..]): a softmax over dst for each
//       src, plus eps, then column sums (over src) and row sums (over dst) divided out in turn, each sum
//       plus eps, `iters` normalisations in all, columns first and last.
void hyper_mix(const float* m, int hc, const float* scale, const float* base, float eps, int iters, float* pre,
               float* post, float* comb);
// y = sum_i pre[i] * x[i * dim ..]: the streams (hc rows of dim) folded into one by the token's pre weights.
void hyper_collapse(const float* x, const float* pre, int hc, int64_t dim, float* y);
// out[dst] = y * post[dst] + sum_src comb[dst + src * hc] * x[src], stream by stream (the branch's output
// spread over the streams and the old streams mixed; out must not alias x).
void hyper_expand(const float* x, const float* y, const float* post, const float* comb, int hc, int64_t dim,
                  float* out);
namespace ops {
// Each row's mix logits (width floats apart) into its pre [hc], post [hc] and comb [hc * hc] weights (post
// and comb empty: the output head's pre alone).
struct HyperMixArgs {
  Act mixes;
  int64_t n = 0, width = 0;
  int hc = 0;
  const float* scale = nullptr;
  const float* base = nullptr;
  float eps = 0;
  int iters = 0;
  Act pre, post, comb;
};
extern const Op<HyperMixArgs> hyper_mix;

// y row = the row's hc streams (hc * dim floats) folded by its pre weights.
struct HyperCollapseArgs {
  Act x, pre;
  int64_t n = 0;
  int hc = 0;
  int64_t dim = 0;
  Act y;
};
extern const Op<HyperCollapseArgs> hyper_collapse;

// out row = y row spread over the streams by post, plus x's streams mixed by comb (out must not alias x).
struct HyperExpandArgs {
  Act x, y, post, comb;
  int64_t n = 0;
  int hc = 0;
  int64_t dim = 0;
  Act out;
};
extern const Op<HyperExpandArgs> hyper_expand;
}  // namespace ops

}  // namespace kestrel

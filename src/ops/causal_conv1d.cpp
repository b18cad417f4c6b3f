#include "ops/causal_conv1d.h"

#include <algorithm>

namespace kestrel {

namespace {

void conv_rows(const float* x, float* out, const float* w, const float* bias, int64_t t0, int64_t t1, int64_t d, int k) {
  for (int64_t t = t0; t < t1; t++)
    for (int64_t c = 0; c < d; c++) {
      float sum = 0.0f;
      for (int i = 0; i < k; i++) {
        const int64_t at = t - (k - 1) + i;
        sum += (at < 0 ? 0.0f : x[at * d + c]) * w[c * k + i];
      }
      out[t * d + c] = bias ? sum + bias[c] : sum;
    }
}

}  // namespace

void causal_conv1d_rows(const float* x, float* out, const float* w, const float* bias, int64_t n, int64_t d, int k) {
  conv_rows(x, out, w, bias, 0, n, d, k);
}

namespace ops {
namespace {

void run_host(const OpContext& c, const CausalConv1dArgs& a) {
  const float* x = OpContext::host(a.x);
  float* out = OpContext::host(a.out);
  constexpr int64_t kRows = 16;
  c.pool().parallel_for((a.n + kRows - 1) / kRows, [&](int64_t b0, int64_t b1) {
    conv_rows(x, out, a.w, a.bias, b0 * kRows, std::min(a.n, b1 * kRows), a.d, a.k);
  });
}

OpCost cost(const CausalConv1dArgs& a) {
  const double n = static_cast<double>(a.n * a.d);
  return {8.0 * n, 2.0 * n * a.k};
}

}  // namespace

const Op<CausalConv1dArgs> causal_conv1d("causal_conv1d", run_host, cost);

}  // namespace ops
}  // namespace kestrel

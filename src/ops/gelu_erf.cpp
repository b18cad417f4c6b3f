#include "ops/gelu_erf.h"

#include <algorithm>
#include <cmath>

namespace kestrel {

void gelu_erf_rows(float* x, int64_t n) {
  constexpr float kSqrtHalf = 0.70710678118654752440084436210484f;  // ggml's SQRT_2_INV
  for (int64_t i = 0; i < n; i++) {
    const float v = x[i];
    x[i] = 0.5f * v * (1.0f + std::erf(v * kSqrtHalf));
  }
}

namespace ops {
namespace {

void run_host(const OpContext& c, const GeluErfArgs& a) {
  float* x = OpContext::host(a.x);
  constexpr int64_t kChunk = 4096;
  c.pool().parallel_for((a.n + kChunk - 1) / kChunk, [&](int64_t c0, int64_t c1) {
    const int64_t end = std::min(a.n, c1 * kChunk);
    gelu_erf_rows(x + c0 * kChunk, end - c0 * kChunk);
  });
}

OpCost cost(const GeluErfArgs& a) { return {20.0 * static_cast<double>(a.n), static_cast<double>(a.n)}; }

}  // namespace

const Op<GeluErfArgs> gelu_erf("gelu_erf", run_host, cost);

}  // namespace ops
}  // namespace kestrel

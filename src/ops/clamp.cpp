#include "ops/clamp.h"

#include <algorithm>

namespace kestrel {

void clamp_rows(float* x, int64_t n, float lo, float hi) {
  for (int64_t i = 0; i < n; i++) {  // ggml's MAX(MIN(x, hi), lo), NaN included (it becomes hi)
    const float m = x[i] < hi ? x[i] : hi;
    x[i] = m > lo ? m : lo;
  }
}

namespace ops {
namespace {

void run_host(const OpContext& c, const ClampArgs& a) {
  float* x = OpContext::host(a.x);
  constexpr int64_t kChunk = 8192;
  c.pool().parallel_for((a.n + kChunk - 1) / kChunk, [&](int64_t c0, int64_t c1) {
    const int64_t end = std::min(a.n, c1 * kChunk);
    clamp_rows(x + c0 * kChunk, end - c0 * kChunk, a.lo, a.hi);
  });
}

OpCost cost(const ClampArgs& a) { return {static_cast<double>(a.n), 2.0 * static_cast<double>(a.n)}; }

}  // namespace

const Op<ClampArgs> clamp("clamp", run_host, cost);

}  // namespace ops
}  // namespace kestrel

#include "ops/gelu.h"

#include <algorithm>

#include "formats/fp16.h"
#include "kernels/ops.h"

namespace kestrel {

void gelu_rows(float* x, int64_t n) {
  const uint16_t* table = gelu_fp16_table();
  for (int64_t i = 0; i < n; i++) {
    const float v = x[i];
    if (v <= -10.0f) x[i] = 0.0f;
    else if (v < 10.0f) x[i] = fp16_to_fp32(table[fp32_to_fp16(v)]);
  }
}

namespace ops {
namespace {

void run_host(const OpContext& c, const GeluArgs& a) {
  float* x = OpContext::host(a.x);
  constexpr int64_t kChunk = 4096;
  c.pool().parallel_for((a.n + kChunk - 1) / kChunk, [&](int64_t c0, int64_t c1) {
    const int64_t end = std::min(a.n, c1 * kChunk);
    gelu_rows(x + c0 * kChunk, end - c0 * kChunk);
  });
}

OpCost cost(const GeluArgs& a) { return {8.0 * static_cast<double>(a.n), static_cast<double>(a.n)}; }

}  // namespace

const Op<GeluArgs> gelu("gelu", run_host, cost);

}  // namespace ops
}  // namespace kestrel

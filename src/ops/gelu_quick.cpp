#include "ops/gelu_quick.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "formats/fp16.h"

namespace kestrel {
namespace {

// gelu_quick(x) of every fp16 x, as fp16: ggml_table_gelu_quick_f16.
const std::array<uint16_t, 65536>& gelu_quick_table() {
  static const std::array<uint16_t, 65536> table = [] {
    std::array<uint16_t, 65536> t{};
    for (uint32_t i = 0; i < 65536; i++) {
      const float x = fp16_to_fp32(static_cast<uint16_t>(i));
      t[i] = fp32_to_fp16(x * (1.0f / (1.0f + std::exp(-1.702f * x))));
    }
    return t;
  }();
  return table;
}

}  // namespace

void gelu_quick_mul_rows(float* gate, const float* up, int64_t n) {
  const auto& table = gelu_quick_table();
  for (int64_t i = 0; i < n; i++) gate[i] = fp16_to_fp32(table[fp32_to_fp16(gate[i])]) * up[i];
}

namespace ops {
namespace {

void run_host(const OpContext& c, const GeluQuickMulArgs& a) {
  float* g = OpContext::host(a.gate);
  const float* u = OpContext::host(a.up);
  constexpr int64_t kChunk = 4096;
  c.pool().parallel_for((a.n + kChunk - 1) / kChunk, [&](int64_t c0, int64_t c1) {
    const int64_t end = std::min(a.n, c1 * kChunk);
    gelu_quick_mul_rows(g + c0 * kChunk, u + c0 * kChunk, end - c0 * kChunk);
  });
}

OpCost cost(const GeluQuickMulArgs& a) { return {8.0 * static_cast<double>(a.n), 3.0 * static_cast<double>(a.n)}; }

}  // namespace

const Op<GeluQuickMulArgs> gelu_quick_mul("gelu_quick_mul", run_host, cost);

}  // namespace ops
}  // namespace kestrel

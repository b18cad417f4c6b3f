#include "ops/hadamard.h"

#include <cmath>

#include "kernels/ops.h"

namespace kestrel::ops {
namespace {
void run_host(const OpContext& c, const HadamardArgs& a) {
  float* x = OpContext::host(a.x);
  c.pool().parallel_for(a.n / a.block, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; b++) walsh_hadamard(x + b * a.block, a.block);
  });
}
OpCost cost(const HadamardArgs& a) { return {8.0 * a.n, static_cast<double>(a.n) * std::log2(a.block)}; }
}  // namespace

const Op<HadamardArgs> hadamard("hadamard", run_host, cost);

}  // namespace kestrel::ops

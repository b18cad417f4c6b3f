#include "ops/sigmoid_gate.h"

#include <algorithm>
#include <cmath>

#include "backend/vulkan/vulkan_backend.h"

namespace kestrel {

void sigmoid_gate_rows(float* x, const float* gates, int64_t n, int64_t per_gate) {
  for (int64_t r = 0; r * per_gate < n; r++) {
    const float s = 1.0f / (1.0f + std::exp(-gates[r]));
    const int64_t end = std::min(n, (r + 1) * per_gate);
    for (int64_t i = r * per_gate; i < end; i++) x[i] *= s;
  }
}

namespace ops {
namespace {

void run_host(const OpContext& c, const SigmoidGateArgs& a) {
  float* x = OpContext::host(a.x);
  const float* g = OpContext::host(a.gates);
  const int64_t rows = (a.n + a.per_gate - 1) / a.per_gate;
  c.pool().parallel_for(rows, [&](int64_t r0, int64_t r1) {
    const int64_t end = std::min(a.n, r1 * a.per_gate);
    sigmoid_gate_rows(x + r0 * a.per_gate, g + r0, end - r0 * a.per_gate, a.per_gate);
  });
}

OpCost cost(const SigmoidGateArgs& a) {
  const double gates = static_cast<double>(a.n) / static_cast<double>(a.per_gate);
  return {8.0 * static_cast<double>(a.n) + 4.0 * gates, static_cast<double>(a.n) + 4.0 * gates};
}

// sigmoid_gate.comp: one invocation per element of x.
void run_vulkan(void* context, const void* args) {
  const auto& a = *static_cast<const SigmoidGateArgs*>(args);
  const uint32_t push[2] = {VulkanOpContext::u32(a.n, "sigmoid_gate"), VulkanOpContext::u32(a.per_gate, "sigmoid_gate")};
  const int64_t gates = (a.n + a.per_gate - 1) / a.per_gate;
  static_cast<VulkanOpContext*>(context)->dispatch(
      "sigmoid_gate",
      {{a.x, a.n, VulkanBuffer::Use::InOut}, {a.gates, gates, VulkanBuffer::Use::In}}, push, sizeof push, a.n);
}

}  // namespace

const Op<SigmoidGateArgs> sigmoid_gate("sigmoid_gate", run_host, cost, {{kVulkanKernel, run_vulkan}});

}  // namespace ops
}  // namespace kestrel

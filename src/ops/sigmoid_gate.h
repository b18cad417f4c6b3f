#pragma once
// A sigmoid gate as a named operator (backend/operator.h): x[i] *= sigmoid(gates[i / per_gate]) for i < n.
// Qwen3.5's and Qwen3-Next's gated attention (per_gate 1: a gate per output value, model/gqa_attention.cpp)
// and Qwen2-MoE's gated shared expert (per_gate = the row's width: one gate per row, model/ffn_blocks.cpp).
// Its host kernel, its Vulkan kernel (sigmoid_gate.comp beside it) and the reference are in sigmoid_gate.cpp.
#include <cstdint>

#include "backend/operator.h"

namespace kestrel {

// The reference: x[i] *= 1 / (1 + exp(-gates[i / per_gate])), the gate rounded to float first.
void sigmoid_gate_rows(float* x, const float* gates, int64_t n, int64_t per_gate);

namespace ops {
struct SigmoidGateArgs {
  Act x, gates;
  int64_t n = 0;
  int64_t per_gate = 1;
};
extern const Op<SigmoidGateArgs> sigmoid_gate;
}  // namespace ops

}  // namespace kestrel

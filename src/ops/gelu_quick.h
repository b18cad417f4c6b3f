#pragma once
// GELU-quick gating as a named operator (backend/operator.h): gate[i] = gelu_quick(gate[i]) * up[i] for i < n,
// gelu_quick(x) = x / (1 + exp(-1.702 x)). A vision tower's gated FFN when its mmproj sets neither clip.use_gelu
// nor clip.use_silu (llama.cpp's FFN_GELU_QUICK: Gemma 4's converter writes neither). Evaluated as ggml's CPU
// backend does (ggml_vec_geglu_quick_f32): the gate rounded to fp16, the value of an fp16 table of gelu_quick,
// times up, so the results are llama.cpp's to the bit.
#include <cstdint>

#include "backend/operator.h"

namespace kestrel {

// The reference.
void gelu_quick_mul_rows(float* gate, const float* up, int64_t n);

namespace ops {
struct GeluQuickMulArgs {
  Act gate, up;
  int64_t n = 0;
};
extern const Op<GeluQuickMulArgs> gelu_quick_mul;
}  // namespace ops

}  // namespace kestrel

#pragma once
// A causal depthwise convolution as a named operator (backend/operator.h): each channel c of n rows of d,
//   out[t][c] = sum_{k < K} x[t - (K - 1) + k][c] * w[c][k]   (+ bias[c])
// rows before the first reading zero: llama.cpp's ggml_ssm_conv over the input padded by K - 1 zero rows in front
// (ggml_pad + ggml_roll), its sum in float from k = 0, the bias a separate add. Gemma 4's audio Conformer's
// light convolution (mmproj/gemma4_audio.cpp).
#include <cstdint>

#include "backend/operator.h"

namespace kestrel {

// The reference over host rows.
void causal_conv1d_rows(const float* x, float* out, const float* w, const float* bias, int64_t n, int64_t d, int k);

namespace ops {
struct CausalConv1dArgs {
  Act x, out;
  const float* w = nullptr;     // d x K taps, host memory
  const float* bias = nullptr;  // d, or null
  int64_t n = 0, d = 0;
  int k = 0;
};
extern const Op<CausalConv1dArgs> causal_conv1d;
}  // namespace ops

}  // namespace kestrel

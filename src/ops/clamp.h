#pragma once
// Clamping as a named operator (backend/operator.h): x[i] = min(max(x[i], lo), hi) for i < n, ggml_clamp's order.
// Gemma 4's vision tower's "clippable" linear layers clamp each product's input and output by the bounds its
// mmproj stores beside the weight (`<name>.input_min`, ...; mmproj/gemma4_vision.cpp).
#include <cstdint>

#include "backend/operator.h"

namespace kestrel {

// The reference.
void clamp_rows(float* x, int64_t n, float lo, float hi);

namespace ops {
struct ClampArgs {
  Act x;
  int64_t n = 0;
  float lo = 0, hi = 0;
};
extern const Op<ClampArgs> clamp;
}  // namespace ops

}  // namespace kestrel

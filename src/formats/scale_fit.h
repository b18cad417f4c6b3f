#pragma once
// Fitting one block's scale (and minimum) to its weights by weighted least
// squares over a sweep of candidate grids: shared by the writers of every
// quantized format (kquant_quantize.cpp, q4q5_formats.cpp, nonlinear4).
// Weights say which elements matter: without an importance matrix a
// writer's own choice (|x|, x², rms + |x|); with one (imatrix.h), ggml's
// rule: importance * sqrt(sigma2 + x²), sigma2 = 2 * mean(x²) of the block.
#include <cstdint>

namespace kestrel {

struct ScaleMin {
  float scale = 0, min = 0;  // x ~ scale * l - min, l in [0, nmax], min >= 0
};

// Asymmetric fit x ~ scale * l - min over levels 0..nmax (n <= 32); levels into L.
ScaleMin fit_scale_min(const float* x, const float* w, int n, int nmax, uint8_t* L);

// Symmetric fit x ~ scale * l, l in [-nmax, nmax - 1] (n <= 32); w null: x².
float fit_scale_symmetric(const float* x, const float* w, int n, int nmax);

// w[i] = importance[i] * sqrt(sigma2 + x[i]^2) with sigma2 = 2 * mean(x^2) over `block` elements.
void importance_weights(const float* x, const float* importance, int n, int block, float* w);

}  // namespace kestrel

#include "kernels/ops.h"

#include <cmath>

namespace kestrel {

void rmsnorm_rows(const float* x, const float* w, float* y, int64_t n_rows, int64_t dim, float eps) {
  for (int64_t r = 0; r < n_rows; r++) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    double ss = 0.0;
    for (int64_t i = 0; i < dim; i++) ss += static_cast<double>(xr[i]) * xr[i];
    const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dim) + eps));
    for (int64_t i = 0; i < dim; i++) yr[i] = w[i] * (xr[i] * scale);
  }
}

void silu_mul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void add_inplace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

void add_bias_rows(float* x, const float* bias, int64_t n_rows, int64_t dim) {
  for (int64_t r = 0; r < n_rows; r++) add_inplace(x + r * dim, bias, dim);
}

void rope_heads(float* x, int64_t row_stride, const int32_t* positions, int64_t n_rows, int h0, int h1, int head_dim,
                const RopeParams& p) {
  const int half = p.n_rot / 2;
  for (int64_t r = 0; r < n_rows; r++) {
    const float pos = static_cast<float>(positions[r]) * p.freq_scale;
    for (int i = 0; i < half; i++) {
      // theta_i = pos * base^(-2i/n_rot)
      const float freq = std::pow(p.freq_base, -2.0f * static_cast<float>(i) / static_cast<float>(p.n_rot));
      const float angle = pos * freq;
      const float c = std::cos(angle), s = std::sin(angle);
      for (int h = h0; h < h1; h++) {
        float* v = x + r * row_stride + static_cast<int64_t>(h) * head_dim;
        const int i0 = p.style == RopeStyle::Adjacent ? 2 * i : i;
        const int i1 = p.style == RopeStyle::Adjacent ? 2 * i + 1 : i + half;
        const float a = v[i0], b = v[i1];
        v[i0] = a * c - b * s;
        v[i1] = a * s + b * c;
      }
    }
  }
}

void rope_rows(float* x, const int32_t* positions, int64_t n_rows, int n_heads, int head_dim, const RopeParams& p) {
  rope_heads(x, static_cast<int64_t>(n_heads) * head_dim, positions, n_rows, 0, n_heads, head_dim, p);
}

}  // namespace kestrel

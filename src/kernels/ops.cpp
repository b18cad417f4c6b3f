#include "kernels/ops.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "formats/fp16.h"

namespace kestrel {

void rmsnorm_rows(const float* x, const float* w, float* y, int64_t n_rows, int64_t dim, float eps) {
  for (int64_t r = 0; r < n_rows; r++) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    // As ggml's rms_norm: float squares summed in double, the mean and the scale in float (the last bit of
    // the scale decides exact halves when the rows are then quantized to 8 bits).
    double ss = 0.0;
    for (int64_t i = 0; i < dim; i++) ss += static_cast<double>(xr[i] * xr[i]);
    const auto mean = static_cast<float>(ss / static_cast<double>(dim));
    const float scale = 1.0f / std::sqrt(mean + eps);
    for (int64_t i = 0; i < dim; i++) yr[i] = w[i] * (xr[i] * scale);
  }
}

void walsh_hadamard(float* x, int n) {
  for (int h = 1; h < n; h *= 2)
    for (int i = 0; i < n; i += 2 * h)
      for (int j = i; j < i + h; j++) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
  const float norm = 1.0f / std::sqrt(static_cast<float>(n));
  for (int i = 0; i < n; i++) x[i] *= norm;
}

void layernorm_rows(const float* x, const float* w, const float* b, float* y, int64_t n_rows, int64_t dim,
                    float eps) {
  for (int64_t r = 0; r < n_rows; r++) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    double sum = 0.0;
    for (int64_t i = 0; i < dim; i++) sum += xr[i];
    const auto mean = static_cast<float>(sum / static_cast<double>(dim));
    double var = 0.0;
    for (int64_t i = 0; i < dim; i++) {
      yr[i] = xr[i] - mean;
      var += static_cast<double>(yr[i]) * yr[i];
    }
    const float scale = 1.0f / std::sqrt(static_cast<float>(var / static_cast<double>(dim)) + eps);
    for (int64_t i = 0; i < dim; i++) yr[i] = yr[i] * scale * w[i] + (b ? b[i] : 0.0f);
  }
}

void silu_mul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void swiglu_clamp(float* gate, const float* up, int64_t n, float limit) {
  for (int64_t i = 0; i < n; i++) {
    const float g = std::min(gate[i], limit), u = std::clamp(up[i], -limit, limit);
    gate[i] = g / (1.0f + std::exp(-g)) * u;
  }
}

void swiglu_oai(float* gate, const float* up, int64_t n, float alpha, float limit) {
  for (int64_t i = 0; i < n; i++) {
    const float g = std::min(gate[i], limit), u = std::clamp(up[i], -limit, limit);
    gate[i] = g / (1.0f + std::exp(alpha * -g)) * (u + 1.0f);
  }
}

namespace {
// gelu(x) of every fp16 x, as fp16: ggml_table_gelu_f16.
const std::array<uint16_t, 65536>& gelu_table() {
  static const std::array<uint16_t, 65536> table = [] {
    std::array<uint16_t, 65536> t{};
    constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f, kCoefA = 0.044715f;
    for (uint32_t i = 0; i < 65536; i++) {
      const float x = fp16_to_fp32(static_cast<uint16_t>(i));
      t[i] = fp32_to_fp16(0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + kCoefA * x * x))));
    }
    return t;
  }();
  return table;
}
}  // namespace

const uint16_t* gelu_fp16_table() { return gelu_table().data(); }

void gelu_mul(float* gate, const float* up, int64_t n) {
  const auto& table = gelu_table();
  for (int64_t i = 0; i < n; i++) {
    const float g = gate[i];
    if (g <= -10.0f) gate[i] = 0.0f;
    else if (g >= 10.0f) gate[i] = g * up[i];
    else gate[i] = fp16_to_fp32(table[fp32_to_fp16(g)]) * up[i];
  }
}

int32_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; i++)
    if (x[i] > x[best]) best = i;
  return static_cast<int32_t>(best);
}

void top_k(const float* x, int64_t n, int k, int32_t* ids, float* vals) {
  thread_local std::vector<int32_t> order;
  order.clear();
  for (int64_t i = 0; i < n; i++)
    if (!std::isnan(x[i])) order.push_back(static_cast<int32_t>(i));
  const auto m = std::min<size_t>(static_cast<size_t>(k), order.size());
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(m), order.end(),
                    [x](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
  for (size_t i = 0; i < m; i++) ids[i] = order[i], vals[i] = x[order[i]];
  for (auto i = static_cast<int>(m); i < k; i++) ids[i] = -1, vals[i] = 0.0f;
}

void softcap_inplace(float* x, int64_t n, float cap) {
  const float inv = 1.0f / cap;
  for (int64_t i = 0; i < n; i++) x[i] = cap * std::tanh(x[i] * inv);
}

void scale_inplace(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; i++) x[i] *= s;
}

void add_inplace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

void add_bias_rows(float* x, const float* bias, int64_t n_rows, int64_t dim) {
  for (int64_t r = 0; r < n_rows; r++) add_inplace(x + r * dim, bias, dim);
}

float rope_mscale(const RopeParams& p) {
  return p.ext_factor != 0.0f ? p.attn_factor * (1.0f + 0.1f * std::log(1.0f / p.freq_scale)) : p.attn_factor;
}

void rope_cos_sin(const RopeParams& p, float mscale, float pos, int i, float* c, float* s) {
  const bool yarn = p.ext_factor != 0.0f;
  // theta_i = pos * base^(-2i/n_rot), interpolated by freq_scale
  const float freq = std::pow(p.freq_base, -2.0f * static_cast<float>(i) / static_cast<float>(p.n_rot));
  const float extrapolated = p.freq_factors ? pos * freq / p.freq_factors[i] : pos * freq;
  float angle = p.freq_scale * extrapolated;
  if (yarn) {
    const float y = (static_cast<float>(i) - p.corr_low) / std::max(0.001f, p.corr_high - p.corr_low);
    const float mix = (1.0f - std::min(1.0f, std::max(0.0f, y))) * p.ext_factor;
    angle = angle * (1.0f - mix) + extrapolated * mix;
  }
  *c = std::cos(angle) * mscale;
  *s = (p.inverse ? -std::sin(angle) : std::sin(angle)) * mscale;
}

void rope_heads(float* x, int64_t row_stride, const int32_t* positions, int64_t n_rows, int h0, int h1, int head_dim,
                const RopeParams& p) {
  const int half = p.n_rot / 2;
  const float mscale = rope_mscale(p);
  for (int64_t r = 0; r < n_rows; r++) {
    const auto pos = static_cast<float>(positions[r]);
    for (int i = 0; i < half; i++) {
      float c, s;
      rope_cos_sin(p, mscale, pos, i, &c, &s);
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

void set_yarn(RopeParams& p, int64_t n_ctx_orig, float beta_fast, float beta_slow) {
  // The pair index whose wavelength fits `rotations` times into n_ctx_orig.
  auto corr_dim = [&](float rotations) {
    return static_cast<float>(p.n_rot) *
           std::log(static_cast<float>(n_ctx_orig) / (rotations * 2.0f * static_cast<float>(M_PI))) /
           (2.0f * std::log(p.freq_base));
  };
  p.ext_factor = 1.0f;
  p.corr_low = std::max(0.0f, std::floor(corr_dim(beta_fast)));
  p.corr_high = std::min(static_cast<float>(p.n_rot - 1), std::ceil(corr_dim(beta_slow)));
}

void rope_rows(float* x, const int32_t* positions, int64_t n_rows, int n_heads, int head_dim, const RopeParams& p) {
  rope_heads(x, static_cast<int64_t>(n_heads) * head_dim, positions, n_rows, 0, n_heads, head_dim, p);
}

}  // namespace kestrel

#include "ops/hyper_connection.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend/vulkan/vulkan_backend.h"

namespace kestrel {
namespace {
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
}  // namespace

void hyper_mix(const float* m, int hc, const float* scale, const float* base, float eps, int iters, float* pre,
               float* post, float* comb) {
  for (int i = 0; i < hc; i++) pre[i] = sigmoid(m[i] * scale[0] + base[i]) + eps;
  if (!post) return;
  for (int i = 0; i < hc; i++) post[i] = 2.0f * sigmoid(m[hc + i] * scale[1] + base[hc + i]);
  const float* mc = m + 2 * hc;
  const float* bc = base + 2 * hc;
  for (int src = 0; src < hc; src++) {
    float* c = comb + src * hc;
    float mx = -INFINITY;
    for (int dst = 0; dst < hc; dst++) mx = std::max(mx, c[dst] = mc[src * hc + dst] * scale[2] + bc[src * hc + dst]);
    double sum = 0.0;
    for (int dst = 0; dst < hc; dst++) sum += c[dst] = std::exp(c[dst] - mx);
    const auto inv = static_cast<float>(1.0 / sum);
    for (int dst = 0; dst < hc; dst++) c[dst] = c[dst] * inv + eps;
  }
  // Each of the hc lines (line a's entries `along` apart, lines `across` apart) divided by its sum + eps.
  const auto normalise = [&](int across, int along) {
    for (int a = 0; a < hc; a++) {
      float* line = comb + a * across;
      double sum = 0.0;
      for (int b = 0; b < hc; b++) sum += line[b * along];
      const float d = static_cast<float>(sum) + eps;
      for (int b = 0; b < hc; b++) line[b * along] /= d;
    }
  };
  const auto norm_cols = [&] { normalise(1, hc); };  // for each dst, the sum over src
  const auto norm_rows = [&] { normalise(hc, 1); };  // for each src, the sum over dst
  norm_cols();
  for (int i = 1; i < iters; i++) norm_rows(), norm_cols();
}

void hyper_collapse(const float* x, const float* pre, int hc, int64_t dim, float* y) {
  for (int64_t j = 0; j < dim; j++) y[j] = x[j] * pre[0];
  for (int i = 1; i < hc; i++)
    for (int64_t j = 0; j < dim; j++) y[j] += x[i * dim + j] * pre[i];
}

void hyper_expand(const float* x, const float* y, const float* post, const float* comb, int hc, int64_t dim,
                  float* out) {
  for (int dst = 0; dst < hc; dst++) {
    float* o = out + dst * dim;
    for (int64_t j = 0; j < dim; j++) o[j] = y[j] * post[dst];
    for (int src = 0; src < hc; src++) {
      const float w = comb[dst + src * hc];
      const float* xs = x + src * dim;
      for (int64_t j = 0; j < dim; j++) o[j] += xs[j] * w;
    }
  }
}

namespace ops {
namespace {
float* host(Act a) { return OpContext::host(a); }

void mix(const OpContext&, const HyperMixArgs& a) {
  for (int64_t r = 0; r < a.n; r++)
    kestrel::hyper_mix(host(a.mixes) + r * a.width, a.hc, a.scale, a.base, a.eps, a.iters, host(a.pre) + r * a.hc,
                       a.post ? host(a.post) + r * a.hc : nullptr, a.comb ? host(a.comb) + r * a.hc * a.hc : nullptr);
}
OpCost mix_cost(const HyperMixArgs& a) {
  return {8.0 * a.n * a.width, 4.0 * a.n * a.hc * a.hc * a.iters};
}

void collapse(const OpContext&, const HyperCollapseArgs& a) {
  for (int64_t r = 0; r < a.n; r++)
    kestrel::hyper_collapse(host(a.x) + r * a.hc * a.dim, host(a.pre) + r * a.hc, a.hc, a.dim, host(a.y) + r * a.dim);
}
OpCost collapse_cost(const HyperCollapseArgs& a) {
  return {4.0 * a.n * (a.hc + 1) * a.dim, 2.0 * a.n * a.hc * a.dim};
}

void expand(const OpContext&, const HyperExpandArgs& a) {
  for (int64_t r = 0; r < a.n; r++)
    kestrel::hyper_expand(host(a.x) + r * a.hc * a.dim, host(a.y) + r * a.dim, host(a.post) + r * a.hc,
                          host(a.comb) + r * a.hc * a.hc, a.hc, a.dim, host(a.out) + r * a.hc * a.dim);
}
OpCost expand_cost(const HyperExpandArgs& a) {
  return {4.0 * a.n * (2 * a.hc + 1) * a.dim, 2.0 * a.n * a.hc * (a.hc + 1) * a.dim};
}
// hyper_collapse.comp: one invocation per output float.
void collapse_vulkan(void* context, const void* args) {
  const auto& a = *static_cast<const HyperCollapseArgs*>(args);
  const int64_t streams = a.n * a.hc * a.dim;
  VulkanOpContext::u32(streams, "hyper_collapse");  // every element's index a uint
  const uint32_t push[3] = {VulkanOpContext::u32(a.n, "hyper_collapse"), VulkanOpContext::u32(a.hc, "hyper_collapse"),
                            VulkanOpContext::u32(a.dim, "hyper_collapse")};
  static_cast<VulkanOpContext*>(context)->dispatch("hyper_collapse",
                                                   {{a.x, streams, VulkanBuffer::Use::In},
                                                    {a.pre, a.n * a.hc, VulkanBuffer::Use::In},
                                                    {a.y, a.n * a.dim, VulkanBuffer::Use::Out}},
                                                   push, sizeof push, a.n * a.dim);
}

// hyper_expand.comp: one invocation per output float.
void expand_vulkan(void* context, const void* args) {
  const auto& a = *static_cast<const HyperExpandArgs*>(args);
  const int64_t streams = a.n * a.hc * a.dim;
  VulkanOpContext::u32(streams, "hyper_expand");  // every element's index a uint
  const uint32_t push[3] = {VulkanOpContext::u32(a.n, "hyper_expand"), VulkanOpContext::u32(a.hc, "hyper_expand"),
                            VulkanOpContext::u32(a.dim, "hyper_expand")};
  static_cast<VulkanOpContext*>(context)->dispatch("hyper_expand",
                                                   {{a.x, streams, VulkanBuffer::Use::In},
                                                    {a.y, a.n * a.dim, VulkanBuffer::Use::In},
                                                    {a.post, a.n * a.hc, VulkanBuffer::Use::In},
                                                    {a.comb, a.n * a.hc * a.hc, VulkanBuffer::Use::In},
                                                    {a.out, streams, VulkanBuffer::Use::Out}},
                                                   push, sizeof push, streams);
}

}  // namespace

const Op<HyperMixArgs> hyper_mix("hyper_mix", mix, mix_cost);
const Op<HyperCollapseArgs> hyper_collapse("hyper_collapse", collapse, collapse_cost,
                                           {{kVulkanKernel, collapse_vulkan}});
const Op<HyperExpandArgs> hyper_expand("hyper_expand", expand, expand_cost, {{kVulkanKernel, expand_vulkan}});

}  // namespace ops
}  // namespace kestrel

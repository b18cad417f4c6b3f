// DeepSeek-V4's operators (kernels/ops.h, kernels/moe_route.h) against their definitions written out here
// in double: the hyper-connection mixes (sigmoids and the Sinkhorn normalisation), the streams' fold and
// spread, the compressor's per-dimension softmax over a block, the clamped SwiGLU, RoPE turned back, and
// sqrt(softplus) routing with experts given by the token. That llama.cpp computes the same is the synth
// cells' business (tests/reference/test_synth_cells.cpp); here each formula and its indexing is pinned.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/moe_route.h"
#include "kernels/ops.h"
#include "ops/compress_blocks.h"
#include "ops/hyper_connection.h"

namespace kestrel {
namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

TEST(HyperConnections, MixesFollowTheirDefinition) {
  constexpr int hc = 4, iters = 20;
  constexpr float eps = 1e-6f;
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> m((2 + hc) * hc), base(m.size());
  for (auto& x : m) x = dist(rng);
  for (auto& x : base) x = 0.5f * dist(rng);
  const float scale[3] = {0.7f, 1.3f, 2.0f};
  float pre[hc], post[hc], comb[hc * hc];
  hyper_mix(m.data(), hc, scale, base.data(), eps, iters, pre, post, comb);
  for (int i = 0; i < hc; i++) {
    EXPECT_NEAR(pre[i], sigmoid(m[i] * 0.7 + base[i]) + eps, 1e-6);
    EXPECT_NEAR(post[i], 2 * sigmoid(m[hc + i] * 1.3 + base[hc + i]), 1e-6);
  }
  // Sinkhorn in double: comb[dst + src * hc] starts as a softmax over dst of each src's logits (plus eps).
  std::vector<double> c(hc * hc);
  for (int src = 0; src < hc; src++) {
    double mx = -1e300, sum = 0;
    for (int dst = 0; dst < hc; dst++) mx = std::max(mx, double{m[2 * hc + dst + src * hc]} * 2.0 + base[2 * hc + dst + src * hc]);
    for (int dst = 0; dst < hc; dst++)
      sum += c[dst + src * hc] = std::exp(double{m[2 * hc + dst + src * hc]} * 2.0 + base[2 * hc + dst + src * hc] - mx);
    for (int dst = 0; dst < hc; dst++) c[dst + src * hc] = c[dst + src * hc] / sum + eps;
  }
  for (int it = 0; it < iters; it++) {
    if (it > 0)
      for (int src = 0; src < hc; src++) {  // each src's weights over dst sum to 1
        double sum = eps;
        for (int dst = 0; dst < hc; dst++) sum += c[dst + src * hc];
        for (int dst = 0; dst < hc; dst++) c[dst + src * hc] /= sum;
      }
    for (int dst = 0; dst < hc; dst++) {  // each dst's weights over src sum to 1
      double sum = eps;
      for (int src = 0; src < hc; src++) sum += c[dst + src * hc];
      for (int src = 0; src < hc; src++) c[dst + src * hc] /= sum;
    }
  }
  for (int i = 0; i < hc * hc; i++) EXPECT_NEAR(comb[i], c[i], 1e-6) << i;
  // After 20 rounds the matrix is nearly doubly stochastic (columns exactly, the last normalised).
  for (int a = 0; a < hc; a++) {
    double rows = 0, cols = 0;
    for (int b = 0; b < hc; b++) rows += comb[b + a * hc], cols += comb[a + b * hc];
    EXPECT_NEAR(rows, 1.0, 2e-3);
    EXPECT_NEAR(cols, 1.0, 1e-5);
  }
  // The output head's mix: pre only, its one scale.
  float head_pre[hc];
  hyper_mix(m.data(), hc, scale, base.data(), eps, 0, head_pre, nullptr, nullptr);
  for (int i = 0; i < hc; i++) EXPECT_FLOAT_EQ(head_pre[i], pre[i]);
}

TEST(HyperConnections, CollapseAndExpandMoveTheStreams) {
  constexpr int hc = 3, dim = 5;
  std::vector<float> x(hc * dim), y(dim), out(hc * dim), folded(dim);
  for (int i = 0; i < hc * dim; i++) x[i] = static_cast<float>(i % 7) - 2.5f;
  for (int j = 0; j < dim; j++) y[j] = 0.25f * static_cast<float>(j + 1);
  const float pre[hc] = {0.5f, 1.0f, 2.0f}, post[hc] = {1.0f, 0.0f, 2.0f};
  float comb[hc * hc];
  for (int i = 0; i < hc * hc; i++) comb[i] = 0.1f * static_cast<float>(i + 1);
  hyper_collapse(x.data(), pre, hc, dim, folded.data());
  hyper_expand(x.data(), y.data(), post, comb, hc, dim, out.data());
  for (int j = 0; j < dim; j++) {
    EXPECT_FLOAT_EQ(folded[j], 0.5f * x[j] + x[dim + j] + 2.0f * x[2 * dim + j]);
    for (int dst = 0; dst < hc; dst++) {
      double want = double{y[j]} * post[dst];
      for (int src = 0; src < hc; src++) want += double{comb[dst + src * hc]} * x[src * dim + j];
      EXPECT_NEAR(out[dst * dim + j], want, 1e-5) << dst << " " << j;
    }
  }
}

TEST(Compressor, EachDimensionIsASoftmaxOverTheBlock) {
  // Rows of [kv (2w) | score (2w)], 8 entries: the first 4 read the first halves, the others the second.
  constexpr int entries = 8, split = 4, w = 3;
  constexpr int64_t stride = 4 * w;
  std::mt19937 rng(9);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> rows(entries * stride);
  for (auto& x : rows) x = dist(rng);
  for (int absent : {0, 4}) {
    float out[w];
    compress_block(rows.data(), stride, entries, split, absent, 0, 2 * w, w, out);
    for (int j = 0; j < w; j++) {
      double mx = -1e300, sum = 0, acc = 0;
      for (int i = absent; i < entries; i++) mx = std::max(mx, double{rows[i * stride + 2 * w + (i >= split) * w + j]});
      for (int i = absent; i < entries; i++) sum += std::exp(rows[i * stride + 2 * w + (i >= split) * w + j] - mx);
      for (int i = absent; i < entries; i++)
        acc += std::exp(rows[i * stride + 2 * w + (i >= split) * w + j] - mx) / sum * rows[i * stride + (i >= split) * w + j];
      EXPECT_NEAR(out[j], acc, 1e-6) << "absent " << absent << " dim " << j;
    }
  }
  // One score far above the others: the block's key is that entry's kv.
  rows[5 * stride + 2 * w + w + 1] = 80.0f;
  float out[w];
  compress_block(rows.data(), stride, entries, split, 0, 0, 2 * w, w, out);
  EXPECT_NEAR(out[1], rows[5 * stride + w + 1], 1e-6);
}

TEST(SwigluClamp, ClampsTheGateAboveAndTheUpBothWays) {
  float gate[4] = {-3.0f, 0.5f, 4.0f, 20.0f};
  const float up[4] = {2.0f, -9.0f, 0.5f, 30.0f};
  swiglu_clamp(gate, up, 4, 1.5f);
  const double g[4] = {-3.0, 0.5, 1.5, 1.5}, u[4] = {1.5, -1.5, 0.5, 1.5};
  for (int i = 0; i < 4; i++) EXPECT_NEAR(gate[i], g[i] * sigmoid(g[i]) * u[i], 1e-6) << i;
}

TEST(Rope, InverseTurnsTheRotationBack) {
  RopeParams p;
  p.n_rot = 16;
  p.freq_base = 160000.0f;
  p.freq_scale = 0.25f;
  set_yarn(p, 1024);
  p.attn_factor = 1.0f / (1.0f + 0.1f * std::log(4.0f));  // DeepSeek's: cos/sin at unit scale
  std::vector<float> x(2 * 64), y;
  for (size_t i = 0; i < x.size(); i++) x[i] = std::sin(0.37f * static_cast<float>(i));
  y = x;
  const int32_t pos[1] = {777};
  rope_rows(y.data() + 48, pos, 1, 2, 64, p);  // the last 16 dims of each 64-wide head
  EXPECT_GT(std::fabs(y[60] - x[60]), 1e-3f);
  EXPECT_EQ(y[10], x[10]);  // outside the rotated dims
  p.inverse = true;
  rope_rows(y.data() + 48, pos, 1, 2, 64, p);
  for (size_t i = 0; i < x.size(); i++) EXPECT_NEAR(y[i], x[i], 1e-5) << i;
}

TEST(MoeRoute, SqrtSoftplusScoresAndExpertsGivenByTheToken) {
  MoeRouting r;
  r.n_expert = 6, r.n_used = 2, r.gating = ExpertGating::SqrtSoftplus, r.normalize = true, r.scale = 1.5f;
  const float logits[12] = {0.1f, -2.0f, 3.0f, 25.0f, -0.5f, 1.0f, 2.0f, 0.0f, -1.0f, 0.5f, 0.25f, -3.0f};
  const float bias[6] = {0, 0, 0, -100.0f, 0, 0};  // expert 3 is never chosen by score
  auto score = [](double x) { return std::sqrt(x > 20 ? x : std::log1p(std::exp(x))); };
  int32_t ids[4];
  float w[4];
  float scratch[12];
  moe_route(r, logits, bias, 2, ids, w, scratch);
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[1], 5);
  const double s0 = score(3.0), s1 = score(1.0);
  EXPECT_NEAR(w[0], 1.5 * s0 / (s0 + s1), 1e-5);
  EXPECT_NEAR(w[1], 1.5 * s1 / (s0 + s1), 1e-5);
  // Hash routing: the experts are given; the weights are still their (unbiased) scores.
  const int32_t forced[4] = {3, 1, 4, 0};
  r.forced = forced;
  moe_route(r, logits, bias, 2, ids, w, scratch);
  EXPECT_EQ(ids[0], 3);
  EXPECT_EQ(ids[1], 1);
  EXPECT_EQ(ids[2], 4);
  EXPECT_EQ(ids[3], 0);
  const double a = score(25.0), b = score(-2.0);
  EXPECT_NEAR(w[0], 1.5 * a / (a + b), 1e-5);
  EXPECT_NEAR(w[1], 1.5 * b / (a + b), 1e-5);
}

}  // namespace
}  // namespace kestrel

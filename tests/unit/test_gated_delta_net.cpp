// Gated DeltaNet (ops/gated_delta_net.h) against a float64 model written here from the recurrence's
// definition (S not transposed, the delta rule as the Gated DeltaNet paper states it), and its two forms (one
// token at a time, chunks of 64 as matrix products) against each other; the convolution against a direct
// float64 convolution; a sequence split over calls against the same sequence in one.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "ops/gated_delta_net.h"

namespace kestrel {
namespace {

struct Inputs {
  GdnShape s;
  std::vector<float> qkv, alpha, beta, conv_w, dt_bias, a;
};

Inputs make_inputs(int64_t n, bool interleaved, uint32_t seed) {
  Inputs in;
  in.s = GdnShape{.d_conv = 4, .n_k_heads = 2, .n_v_heads = 4, .head_dim = 16, .interleaved = interleaved, .eps = 1e-6f};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto fill = [&](std::vector<float>& v, int64_t count, float scale, float offset) {
    v.resize(static_cast<size_t>(count));
    for (float& x : v) x = offset + scale * u(rng);
  };
  fill(in.qkv, n * in.s.channels(), 1.0f, 0.0f);
  fill(in.alpha, n * in.s.n_v_heads, 1.0f, 0.0f);
  fill(in.beta, n * in.s.n_v_heads, 2.0f, 0.0f);
  fill(in.conv_w, in.s.channels() * in.s.d_conv, 0.6f, 0.0f);
  fill(in.dt_bias, in.s.n_v_heads, 0.5f, 0.5f);
  fill(in.a, in.s.n_v_heads, 0.5f, -1.0f);
  return in;
}

// The recurrence in float64 from prepared inputs (after gdn_conv and gdn_gates): S[i][j] (key i, value j).
std::vector<double> reference(const GdnShape& s, const std::vector<float>& x, const std::vector<float>& g,
                              const std::vector<float>& beta, int64_t n) {
  const int64_t hd = s.head_dim, ch = s.channels();
  std::vector<double> out(static_cast<size_t>(n * s.value_dim()));
  for (int h = 0; h < s.n_v_heads; h++) {
    const int kh = s.interleaved ? h / (s.n_v_heads / s.n_k_heads) : h % s.n_k_heads;
    std::vector<double> S(static_cast<size_t>(hd * hd), 0.0);
    for (int64_t t = 0; t < n; t++) {
      const float* q = x.data() + t * ch + kh * hd;
      const float* k = x.data() + t * ch + s.key_dim() + kh * hd;
      const float* v = x.data() + t * ch + 2 * s.key_dim() + h * hd;
      const double decay = std::exp(static_cast<double>(g[t * s.n_v_heads + h]));
      const double b = beta[t * s.n_v_heads + h];
      for (double& e : S) e *= decay;
      for (int64_t j = 0; j < hd; j++) {
        double sk = 0;
        for (int64_t i = 0; i < hd; i++) sk += S[i * hd + j] * k[i];
        const double delta = b * (v[j] - sk);
        for (int64_t i = 0; i < hd; i++) S[i * hd + j] += k[i] * delta;
      }
      for (int64_t j = 0; j < hd; j++) {
        double o = 0;
        for (int64_t i = 0; i < hd; i++) o += S[i * hd + j] * q[i];
        out[static_cast<size_t>(t * s.value_dim() + h * hd + j)] = o / std::sqrt(static_cast<double>(hd));
      }
    }
  }
  return out;
}

// conv + gates over all channels and rows, in place (what the backend runs before the recurrence).
void prepare(Inputs& in, int64_t n, std::vector<float>& conv_state) {
  const GdnParams p{in.conv_w.data(), in.dt_bias.data(), in.a.data()};
  gdn_conv(in.s, p, in.qkv.data(), n, conv_state.data(), 0, in.s.channels());
  gdn_gates(in.s, p, in.qkv.data(), in.alpha.data(), in.beta.data(), 0, n);
}

TEST(GatedDeltaNet, ConvolutionIsCausalAndCarriesItsState) {
  const int64_t n = 20;
  Inputs in = make_inputs(n, false, 1);
  const std::vector<float> raw = in.qkv;
  const GdnParams p{in.conv_w.data(), in.dt_bias.data(), in.a.data()};
  std::vector<float> whole = raw, split = raw;
  std::vector<float> st1(static_cast<size_t>(in.s.conv_state()), 0.0f), st2 = st1;
  gdn_conv(in.s, p, whole.data(), n, st1.data(), 0, in.s.channels());
  gdn_conv(in.s, p, split.data(), 7, st2.data(), 0, in.s.channels());
  gdn_conv(in.s, p, split.data() + 7 * in.s.channels(), n - 7, st2.data(), 0, in.s.channels());
  EXPECT_EQ(whole, split);
  EXPECT_EQ(st1, st2);
  const int64_t ch = in.s.channels();
  for (int64_t t = 0; t < n; t++)
    for (int64_t c = 0; c < ch; c += 7) {
      double sum = 0;
      for (int i = 0; i < 4; i++) {
        const int64_t src = t - 3 + i;
        if (src >= 0) sum += static_cast<double>(raw[src * ch + c]) * in.conv_w[c * 4 + i];
      }
      const double silu = sum / (1.0 + std::exp(-sum));
      EXPECT_NEAR(whole[t * ch + c], silu, 1e-5) << "t " << t << " channel " << c;
    }
}

void check_forms(bool interleaved) {
  const int64_t n = 150;  // chunks of 64, 64 and 22
  Inputs in = make_inputs(n, interleaved, interleaved ? 3 : 2);
  std::vector<float> conv_state(static_cast<size_t>(in.s.conv_state()), 0.0f);
  prepare(in, n, conv_state);
  for (int64_t h = 0; h < 2LL * in.s.n_k_heads; h++) {  // q and k heads come out L2-normalised
    double sq = 0;
    for (int64_t i = 0; i < in.s.head_dim; i++) sq += std::pow(in.qkv[h * in.s.head_dim + i], 2);
    EXPECT_NEAR(sq, 1.0, 1e-4);
  }
  const std::vector<double> ref = reference(in.s, in.qkv, in.alpha, in.beta, n);
  std::vector<float> seq(ref.size()), chunked(ref.size());
  std::vector<float> st_seq(static_cast<size_t>(in.s.ssm_state()), 0.0f), st_chunk = st_seq;
  std::vector<float> scratch(static_cast<size_t>(gdn_chunk_scratch(in.s, 64)));
  for (int h = 0; h < in.s.n_v_heads; h++) {
    gdn_recur(in.s, in.qkv.data(), in.alpha.data(), in.beta.data(), n, st_seq.data(), h, seq.data());
    gdn_recur_chunked(in.s, in.qkv.data(), in.alpha.data(), in.beta.data(), n, st_chunk.data(), h, chunked.data(), 64,
                      scratch.data());
  }
  double worst_seq = 0, worst_chunk = 0, scale = 0;
  for (size_t i = 0; i < ref.size(); i++) {
    scale = std::max(scale, std::abs(ref[i]));
    worst_seq = std::max(worst_seq, std::abs(seq[i] - ref[i]));
    worst_chunk = std::max(worst_chunk, std::abs(chunked[i] - ref[i]));
  }
  ASSERT_GT(scale, 0.05);  // outputs of a real size
  EXPECT_LT(worst_seq, 2e-5 * scale);
  EXPECT_LT(worst_chunk, 2e-5 * scale);
  for (size_t i = 0; i < st_seq.size(); i++) EXPECT_NEAR(st_seq[i], st_chunk[i], 2e-5) << "state " << i;
}

TEST(GatedDeltaNet, SequentialAndChunkedFormsEqualTheFloat64Recurrence) { check_forms(false); }
TEST(GatedDeltaNet, RepeatInterleavedHeadsToo) { check_forms(true); }

TEST(GatedDeltaNet, KeyHeadOfEachValueHead) {
  GdnShape tiled{.d_conv = 4, .n_k_heads = 2, .n_v_heads = 4, .head_dim = 8};
  GdnShape inter = tiled;
  inter.interleaved = true;
  EXPECT_EQ(tiled.key_head(0), 0);
  EXPECT_EQ(tiled.key_head(1), 1);
  EXPECT_EQ(tiled.key_head(2), 0);
  EXPECT_EQ(inter.key_head(1), 0);
  EXPECT_EQ(inter.key_head(2), 1);
}

// The backend's operator (the CPU backend: threads over heads, the chunked form for long runs) over two
// sequences in one call equals each run alone, and a sequence continued over two calls its one call.
TEST(GatedDeltaNet, BackendRunsSequencesApartAndCarriesState) {
  auto be = make_cpu_backend(2);
  const int64_t n1 = 100, n2 = 30;
  Inputs a = make_inputs(n1, false, 5), b = make_inputs(n2, false, 6);
  b.conv_w = a.conv_w, b.dt_bias = a.dt_bias, b.a = a.a;
  const GdnShape& s = a.s;
  const GdnParams p{a.conv_w.data(), a.dt_bias.data(), a.a.data()};
  auto run = [&](std::vector<float> qkv, std::vector<float> alpha, std::vector<float> beta,
                 const std::vector<GdnSequence>& seqs, int64_t rows) {
    std::vector<float> out(static_cast<size_t>(rows * s.value_dim()));
    ops::gated_delta_net(*be, {s, p, be->host_view(qkv.data()), be->host_view(alpha.data()),
                               be->host_view(beta.data()), seqs.data(), static_cast<int>(seqs.size()),
                               be->host_view(out.data())});
    return out;
  };
  auto cat = [](std::vector<float> x, const std::vector<float>& y) {
    x.insert(x.end(), y.begin(), y.end());
    return x;
  };
  std::vector<float> sa(static_cast<size_t>(s.state_floats()), 0.0f), sb = sa, sa2 = sa, sb2 = sa;
  const std::vector<float> both = run(cat(a.qkv, b.qkv), cat(a.alpha, b.alpha), cat(a.beta, b.beta),
                                      {{0, n1, sa.data()}, {n1, n2, sb.data()}}, n1 + n2);
  const std::vector<float> alone_a = run(a.qkv, a.alpha, a.beta, {{0, n1, sa2.data()}}, n1);
  const std::vector<float> alone_b = run(b.qkv, b.alpha, b.beta, {{0, n2, sb2.data()}}, n2);
  EXPECT_EQ(std::vector<float>(both.begin(), both.begin() + n1 * s.value_dim()), alone_a);
  EXPECT_EQ(std::vector<float>(both.begin() + n1 * s.value_dim(), both.end()), alone_b);
  EXPECT_EQ(sa, sa2);
  // a's 100 rows as 99 + 1 (decode after prefill): the last row's output as in one call, within rounding
  // (the 99-row call runs the chunked form).
  std::vector<float> st(static_cast<size_t>(s.state_floats()), 0.0f);
  const int64_t ch = s.channels(), hv = s.n_v_heads;
  run(std::vector<float>(a.qkv.begin(), a.qkv.begin() + 99 * ch),
      std::vector<float>(a.alpha.begin(), a.alpha.begin() + 99 * hv),
      std::vector<float>(a.beta.begin(), a.beta.begin() + 99 * hv), {{0, 99, st.data()}}, 99);
  const std::vector<float> last = run(std::vector<float>(a.qkv.begin() + 99 * ch, a.qkv.end()),
                                      std::vector<float>(a.alpha.begin() + 99 * hv, a.alpha.end()),
                                      std::vector<float>(a.beta.begin() + 99 * hv, a.beta.end()),
                                      {{0, 1, st.data()}}, 1);
  for (int64_t j = 0; j < s.value_dim(); j++) EXPECT_NEAR(last[j], alone_a[99 * s.value_dim() + j], 1e-5);
}

}  // namespace
}  // namespace kestrel

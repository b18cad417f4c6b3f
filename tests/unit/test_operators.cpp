// The named operators (backend/operator.h): the table lists each once, a call reaches the backend through
// Backend::run (so a wrapper watching run() sees every one), the CPU backend computes what the operator's
// reference says, and on the Vulkan backend (lavapipe in CI) an operator with a Vulkan kernel runs on the device
// while one without runs its host kernel after the recorded work — with the same numbers either way.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend/forwarding_backend.h"
#include "backend/operator.h"
#include "backend/vulkan/vulkan_backend.h"
#include "ops/gated_delta_net.h"
#include "ops/hadamard.h"
#include "ops/hyper_connection.h"
#include "ops/local_rel_attention.h"
#include "ops/causal_conv1d.h"
#include "ops/clamp.h"
#include "ops/gelu_erf.h"
#include "ops/gelu_quick.h"
#include "ops/sigmoid_gate.h"
#include "formats/fp16.h"

namespace kestrel {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

TEST(Operators, TheTableListsEachOperatorOnceWithItsKernels) {
  std::set<std::string> names;
  for (const Operator* op : operators()) EXPECT_TRUE(names.insert(op->name()).second) << op->name() << " twice";
  for (const char* name : {"gated_delta_net", "hyper_mix", "hyper_collapse", "hyper_expand", "compress_blocks",
                           "hadamard", "indexer_top_k", "sigmoid_gate", "gelu", "gelu_quick_mul", "clamp", "gelu_erf"})
    EXPECT_TRUE(names.count(name)) << name << " missing from operators()";
  for (const Operator* op : {static_cast<const Operator*>(&ops::sigmoid_gate), static_cast<const Operator*>(&ops::hyper_collapse),
                             static_cast<const Operator*>(&ops::hyper_expand)})
    EXPECT_NE(op->device_kernel(kVulkanKernel), nullptr) << op->name();
  EXPECT_EQ(ops::gated_delta_net.device_kernel(kVulkanKernel), nullptr);
  const std::string list = operator_list();
  EXPECT_NE(list.find("sigmoid_gate (host, vulkan)"), std::string::npos) << list;
  EXPECT_NE(list.find("hyper_expand (host, vulkan)"), std::string::npos) << list;
  EXPECT_NE(list.find("gated_delta_net (host)"), std::string::npos) << list;
}

// A wrapper that overrides only run(): it sees every named operator, with its own arguments.
class Watcher final : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  std::vector<std::string> seen;
  int64_t gated_n = -1;
  void run(const Operator& op, const void* args) override {
    seen.emplace_back(op.name());
    if (const auto* a = ops::sigmoid_gate.args_if(op, args)) gated_n = a->n;
    ForwardingBackend::run(op, args);
  }
};

TEST(Operators, AWrapperOfRunSeesEveryCallWithItsArguments) {
  auto cpu = make_cpu_backend(2);
  Watcher w(*cpu);
  std::vector<float> x = random_floats(64, 1), g = random_floats(8, 2), y(16), pre = random_floats(8, 3);
  ops::sigmoid_gate(w, {w.host_view(x.data()), w.host_view(g.data()), 64, 8});
  ops::hadamard(w, {w.host_view(x.data()), 64, 16});
  ops::hyper_collapse(w, {w.host_view(x.data()), w.host_view(pre.data()), 2, 4, 8, w.host_view(y.data())});
  EXPECT_EQ(w.seen, (std::vector<std::string>{"sigmoid_gate", "hadamard", "hyper_collapse"}));
  EXPECT_EQ(w.gated_n, 64);
}

// x[i] * sigmoid(g[i / per_gate]) in double: the operator's definition, not its code.
std::vector<double> gated_in_double(const std::vector<float>& x, const std::vector<float>& g, int64_t per_gate) {
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); i++) out[i] = x[i] / (1.0 + std::exp(-static_cast<double>(g[i / per_gate])));
  return out;
}

// GELU-quick gating (Gemma 4's vision FFN) as ggml's CPU backend computes it: the gate rounded to F16, the F16
// of gelu_quick there, times up; against the definition in double, within the F16 steps.
TEST(Operators, GeluQuickMulOnTheCpuIsGgmlsTable) {
  auto cpu = make_cpu_backend(2);
  const int64_t n = 10000;
  std::vector<float> g = random_floats(static_cast<size_t>(n), 11, 4.0f), u = random_floats(static_cast<size_t>(n), 12);
  g[0] = 0.0f, g[1] = -30.0f, g[2] = 30.0f;
  std::vector<float> out = g;
  ops::gelu_quick_mul(*cpu, {cpu->host_view(out.data()), cpu->host_view(u.data()), n});
  for (int64_t i = 0; i < n; i++) {
    const double x = fp16_to_fp32(fp32_to_fp16(g[static_cast<size_t>(i)]));  // the table's input
    const double want = x / (1.0 + std::exp(-1.702 * x)) * u[static_cast<size_t>(i)];
    EXPECT_NEAR(out[static_cast<size_t>(i)], want, 1e-3 * std::abs(want) + 1e-6) << g[static_cast<size_t>(i)];
  }
  // Two gates one F16 step apart round to the same entry: the same output (the table, not the formula).
  const float a = 1.0f, b = std::nextafter(1.0f, 2.0f), one = 1.0f;
  float ga = a, gb = b;
  gelu_quick_mul_rows(&ga, &one, 1);
  gelu_quick_mul_rows(&gb, &one, 1);
  EXPECT_EQ(ga, gb);
}

// GELU in its erf form (Whisper's encoder) against the definition in double: no table (two inputs a last bit apart
// give different outputs, unlike gelu's), and the known values.
TEST(Operators, GeluErfIsTheExactForm) {
  auto cpu = make_cpu_backend(2);
  const int64_t n = 10000;
  std::vector<float> x = random_floats(static_cast<size_t>(n), 13, 4.0f);
  x[0] = 0.0f, x[1] = 1.0f, x[2] = -1.0f, x[3] = 30.0f, x[4] = -30.0f;
  std::vector<float> out = x;
  ops::gelu_erf(*cpu, {cpu->host_view(out.data()), n});
  for (int64_t i = 0; i < n; i++) {
    const double v = x[static_cast<size_t>(i)], want = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    // (1 + erf(x) in float cancels for x < 0: an error up to an ulp of 1 times x.)
    EXPECT_NEAR(out[static_cast<size_t>(i)], want, 2e-7 * std::abs(want) + 1.2e-7 * std::abs(v)) << v;
  }
  EXPECT_NEAR(out[1], 0.8413447460685429, 1e-7);
  EXPECT_NEAR(out[2], -0.15865525393145707, 1e-7);
  EXPECT_EQ(out[3], 30.0f);
  EXPECT_EQ(out[4], -0.0f);
  float a = 1.0f, b = std::nextafter(1.0f, 2.0f);
  gelu_erf_rows(&a, 1);
  gelu_erf_rows(&b, 1);
  EXPECT_NE(a, b);
}

// Clamping as ggml's MAX(MIN(x, hi), lo): a NaN becomes hi.
TEST(Operators, ClampIsGgmlsMaxOfMin) {
  auto cpu = make_cpu_backend(1);
  std::vector<float> x = {-5.0f, -1.0f, 0.5f, 1.0f, 7.0f, std::nanf("")};
  ops::clamp(*cpu, {cpu->host_view(x.data()), static_cast<int64_t>(x.size()), -1.0f, 2.0f});
  EXPECT_EQ(x, (std::vector<float>{-1.0f, -1.0f, 0.5f, 1.0f, 2.0f, 2.0f}));
}

TEST(Operators, SigmoidGateOnTheCpuIsItsDefinition) {
  auto cpu = make_cpu_backend(2);
  for (const int64_t per_gate : {int64_t{1}, int64_t{7}, int64_t{64}}) {
    const int64_t n = 7 * 64;
    std::vector<float> x = random_floats(n, 4, 3.0f), g = random_floats((n + per_gate - 1) / per_gate, 5, 4.0f);
    const std::vector<double> want = gated_in_double(x, g, per_gate);
    ops::sigmoid_gate(*cpu, {cpu->host_view(x.data()), cpu->host_view(g.data()), n, per_gate});
    for (int64_t i = 0; i < n; i++)
      ASSERT_NEAR(x[i], want[i], 2e-6 * std::max(1.0, std::fabs(want[i]))) << "per_gate " << per_gate << " [" << i << "]";
  }
}

class VulkanOperators : public ::testing::Test {
 protected:
  void SetUp() override {
    cpu_ = make_cpu_backend(1);
    gpu_ = make_vulkan_backend(VulkanOptions{}, make_cpu_backend(1));
    ASSERT_NE(device_counters(*gpu_), nullptr);
  }
  Act upload(const std::vector<float>& v) {
    Act a = gpu_->alloc(static_cast<int64_t>(v.size()));
    gpu_->copy(a, 0, gpu_->host_view(v.data()), 0, 1, static_cast<int64_t>(v.size()));
    return a;
  }
  std::vector<float> download(Act a, size_t n) {
    std::vector<float> v(n);
    gpu_->read(a, v.data(), static_cast<int64_t>(n));
    return v;
  }
  std::unique_ptr<Backend> cpu_, gpu_;
};

// sigmoid_gate has a Vulkan kernel: it runs on the device (a dispatch, no CPU fallback) and gives the CPU's numbers
// within exp()'s rounding; per_gate 1 (Qwen3.5's gated attention) and a row's width (Qwen2-MoE's shared expert).
TEST_F(VulkanOperators, AnOperatorWithAVulkanKernelRunsOnTheDevice) {
  const std::string device = device_counters(*gpu_)->device;
  for (const int64_t per_gate : {int64_t{1}, int64_t{96}}) {
    const int64_t n = 5 * 96 + 17;  // not a multiple of the workgroup
    const std::vector<float> x = random_floats(n, 6, 3.0f), g = random_floats((n + per_gate - 1) / per_gate, 7, 4.0f);
    std::vector<float> want = x;
    ops::sigmoid_gate(*cpu_, {cpu_->host_view(want.data()), cpu_->host_view(g.data()), n, per_gate});
    const Act dx = upload(x), dg = upload(g);
    const DeviceCounters before = *device_counters(*gpu_);
    ops::sigmoid_gate(*gpu_, {dx, dg, n, per_gate});
    const std::vector<float> got = download(dx, static_cast<size_t>(n));
    const DeviceCounters& after = *device_counters(*gpu_);
    EXPECT_GT(after.dispatches, before.dispatches) << "nothing ran on " << device;
    EXPECT_EQ(after.host_ops, before.host_ops) << "sigmoid_gate ran on the CPU instead of " << device;
    for (int64_t i = 0; i < n; i++)
      ASSERT_NEAR(got[i], want[i], 1e-5 * std::max(1.0f, std::fabs(want[i]))) << "per_gate " << per_gate << " [" << i << "]";
    gpu_->release(dx);
    gpu_->release(dg);
  }
}

// DeepSeek-V4's hyper-connection fold and spread run on the device and give the host kernel's floats exactly (the
// same order of sums, no fused multiply-adds): rows of hc = 4 streams, dim not a multiple of the workgroup.
TEST_F(VulkanOperators, HyperCollapseAndExpandGiveTheHostKernelsFloats) {
  const int64_t n = 3, dim = 200;
  const int hc = 4;
  const auto size = [](int64_t v) { return static_cast<size_t>(v); };
  const std::vector<float> x = random_floats(size(n * hc * dim), 11, 2.0f), y = random_floats(size(n * dim), 12, 2.0f),
                           pre = random_floats(size(n * hc), 13), post = random_floats(size(n * hc), 14),
                           comb = random_floats(size(n * hc * hc), 15);
  std::vector<float> want_y(size(n * dim)), want_out(size(n * hc * dim));
  ops::hyper_collapse(*cpu_, {cpu_->host_view(x.data()), cpu_->host_view(pre.data()), n, hc, dim,
                              cpu_->host_view(want_y.data())});
  ops::hyper_expand(*cpu_, {cpu_->host_view(x.data()), cpu_->host_view(y.data()), cpu_->host_view(post.data()),
                            cpu_->host_view(comb.data()), n, hc, dim, cpu_->host_view(want_out.data())});
  const Act dx = upload(x), dy = upload(y), dpre = upload(pre), dpost = upload(post), dcomb = upload(comb);
  const Act got_y = gpu_->alloc(n * dim), got_out = gpu_->alloc(n * hc * dim);
  const DeviceCounters before = *device_counters(*gpu_);
  ops::hyper_collapse(*gpu_, {dx, dpre, n, hc, dim, got_y});
  ops::hyper_expand(*gpu_, {dx, dy, dpost, dcomb, n, hc, dim, got_out});
  EXPECT_EQ(download(got_y, want_y.size()), want_y);
  EXPECT_EQ(download(got_out, want_out.size()), want_out);
  const DeviceCounters& after = *device_counters(*gpu_);
  EXPECT_EQ(after.host_ops, before.host_ops) << "a hyper-connection operator ran on the CPU";
  EXPECT_EQ(after.device_ops, before.device_ops + 2);
  for (Act a : {dx, dy, dpre, dpost, dcomb, got_y, got_out}) gpu_->release(a);
}

// hadamard has none: the device finishes what it recorded, then the CPU backend runs the host kernel on the same
// buffers (counted as a host operator) — the result is the host kernel's exactly.
TEST_F(VulkanOperators, AnOperatorWithoutOneRunsItsHostKernelOnTheSameBuffers) {
  const int64_t n = 4 * 64;
  const std::vector<float> x = random_floats(n, 8);
  std::vector<float> want = x;
  ops::hadamard(*cpu_, {cpu_->host_view(want.data()), n, 64});
  const Act dx = upload(x);
  gpu_->scale(dx, n, 1.0f);  // recorded device work the fallback must finish first
  const uint64_t host_before = device_counters(*gpu_)->host_ops;
  ops::hadamard(*gpu_, {dx, n, 64});
  EXPECT_EQ(device_counters(*gpu_)->host_ops, host_before + 1);
  EXPECT_EQ(download(dx, static_cast<size_t>(n)), want);
  gpu_->release(dx);
}


// Gemma 4's audio attention against llama.cpp's graph read literally, in double: q and k scaled, the queries cut
// into blocks of 12 over 24 keys (12 before the block, from the sequence padded by 12 zeros in front), the
// relative term by the Transformer-XL shift of q . rel over 13 positions padded to 25, softcap, the mask (key <=
// query, distance < 12, inside the sequence), the softmax over all 24, times v. The operator keeps only the window.
TEST(Operators, LocalRelAttentionIsGemma4asBlockedGraph) {
  auto cpu = make_cpu_backend(2);
  const int64_t n = 29, heads = 3, hd = 8, w = heads * hd;
  constexpr int C = 12, P = 12, S = C + P, R = P + 1;
  const std::vector<float> q = random_floats(static_cast<size_t>(n * w), 21, 1.5f),
                           k = random_floats(static_cast<size_t>(n * w), 22, 1.5f),
                           v = random_floats(static_cast<size_t>(n * w), 23, 1.0f),
                           rel = random_floats(static_cast<size_t>(R * w), 24, 1.0f),
                           qd = random_floats(static_cast<size_t>(hd), 25, 0.5f),
                           kd = random_floats(static_cast<size_t>(hd), 26, 0.5f);
  LocalRelAttentionShape s;
  s.n = n, s.heads = heads, s.head_dim = hd, s.window = 12, s.past = P;
  s.q_scale = 0.51f, s.k_scale = 1.89f, s.softcap = 50.0f, s.q_dim = qd.data(), s.k_dim = kd.data();
  std::vector<float> out(static_cast<size_t>(n * w), -7.0f);
  std::vector<float> qc = q, kc = k, vc = v, rc = rel;
  ops::local_rel_attention(*cpu, {cpu->host_view(qc.data()), cpu->host_view(kc.data()), cpu->host_view(vc.data()),
                                  cpu->host_view(rc.data()), cpu->host_view(out.data()), s});
  const int64_t blocks = (n + C - 1) / C;
  double worst = 0;
  for (int64_t h = 0; h < heads; h++)
    for (int64_t b = 0; b < blocks; b++)
      for (int qi = 0; qi < C; qi++) {
        const int64_t gq = b * C + qi;
        if (gq >= n) continue;
        auto qs = [&](int64_t d) { return double(q[gq * w + h * hd + d]) * s.q_scale * qd[d]; };
        // bd before the shift: [R] per query; the shift reads padded row (qi*S + kk) of (S + 1) columns.
        double score[S];
        for (int kk = 0; kk < S; kk++) {
          const int64_t gk = b * C - P + kk;
          double ac = 0;
          if (gk >= 0 && gk < n)
            for (int64_t d = 0; d < hd; d++) ac += qs(d) * double(k[gk * w + h * hd + d]) * s.k_scale * kd[d];
          const int flat = qi * S + kk, row = flat / (S + 1), col = flat % (S + 1);
          double bd = 0;
          if (col < R) {
            for (int64_t d = 0; d < hd; d++)
              bd += double(q[(b * C + row) * w + h * hd + d]) * s.q_scale * qd[d] * double(rel[col * w + h * hd + d]);
          }
          double x = std::tanh((ac + bd) / 50.0) * 50.0;
          const bool seen = gk >= 0 && gk < n && gk <= gq && gq - gk < P;
          score[kk] = x + (seen ? 0.0 : -1e9);
        }
        double mx = -1e300, sum = 0;
        for (double x : score) mx = std::max(mx, x);
        for (double& x : score) sum += (x = std::exp(x - mx));
        for (int64_t d = 0; d < hd; d++) {
          double o = 0;
          for (int kk = 0; kk < S; kk++) {
            const int64_t gk = b * C - P + kk;
            if (gk >= 0 && gk < n) o += score[kk] / sum * double(v[gk * w + h * hd + d]);
          }
          const double got = out[static_cast<size_t>(gq * w + h * hd + d)];
          worst = std::max(worst, std::abs(got - o));
          EXPECT_NEAR(got, o, 2e-5) << "query " << gq << " head " << h << " dim " << d;
        }
      }
  EXPECT_GT(worst, 0.0);  // (computed in float: not the double reference bit for bit)
  // The reference function and the operator agree exactly.
  std::vector<float> ref(out.size());
  local_rel_attention_rows(q.data(), k.data(), v.data(), rel.data(), ref.data(), s);
  EXPECT_EQ(ref, out);
}

// ggml_ssm_conv over the rows padded by K - 1 zeros in front, then the bias: a causal depthwise convolution.
TEST(Operators, CausalConv1dIsSsmConvOverTheFrontPaddedRows) {
  auto cpu = make_cpu_backend(2);
  const int64_t n = 37, d = 6;
  const int K = 5;
  const std::vector<float> x = random_floats(static_cast<size_t>(n * d), 31, 1.0f),
                           wt = random_floats(static_cast<size_t>(d * K), 32, 1.0f),
                           b = random_floats(static_cast<size_t>(d), 33, 1.0f);
  std::vector<float> xc = x, out(static_cast<size_t>(n * d), -3.0f);
  ops::causal_conv1d(*cpu, {cpu->host_view(xc.data()), cpu->host_view(out.data()), wt.data(), b.data(), n, d, K});
  // sx: [K - 1 + n, d] with the zeros first, as ggml_pad + ggml_roll make it.
  std::vector<float> sx(static_cast<size_t>((K - 1 + n) * d), 0.0f);
  std::copy(x.begin(), x.end(), sx.begin() + (K - 1) * d);
  for (int64_t t = 0; t < n; t++)
    for (int64_t c = 0; c < d; c++) {
      float sum = 0.0f;
      for (int i = 0; i < K; i++) sum += sx[static_cast<size_t>((t + i) * d + c)] * wt[static_cast<size_t>(c * K + i)];
      EXPECT_EQ(out[static_cast<size_t>(t * d + c)], sum + b[static_cast<size_t>(c)]) << t << " " << c;
    }
  // The first row sees only its own value (the last tap).
  EXPECT_EQ(out[0], x[0] * wt[K - 1] + b[0]);
}

}  // namespace
}  // namespace kestrel

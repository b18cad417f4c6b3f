// The Vulkan backend's operators against the CPU backend on random inputs (CI runs them on lavapipe, Mesa's
// Vulkan on the CPU). Each test says which device ran and checks the operator ran there (the backend's
// counters), not on the CPU it falls back to. Tolerances, per operator:
//  - matrix products: both backends multiply the same rounded activations (fp16 / bf16 / 8-bit blocks as the
//    weight type asks) by the same weights; only the float summation order differs: |gpu - cpu| <= 1e-4 of
//    the row's sum of |terms| (the scale of what rounding in another order can move);
//  - norms, RoPE, element-wise: 1e-5 relative (exp, tanh, sqrt of another library).
// A machine without a Vulkan device fails these tests (scripts/setup.sh installs lavapipe), it does not skip.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "formats/block_formats.h"
#include "backend/backend.h"
#include "kernels/moe_route.h"
#include "kernels/ops.h"
#include "backend/vulkan/vulkan_backend.h"

namespace kestrel {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

class VulkanOps : public ::testing::Test {
 protected:
  void SetUp() override { make(); }
  void make(size_t max_binding = 0) {
    CpuBackendOptions o;
    o.repack_weights = false;
    cpu_ = make_cpu_backend(1, o);
    VulkanOptions vo;
    vo.max_binding_bytes = max_binding;
    gpu_ = make_vulkan_backend(vo, make_cpu_backend(1, o));
    const DeviceCounters* c = device_counters(*gpu_);
    ASSERT_NE(c, nullptr);
    device_ = c->device;
  }
  // Runs f on the device, checks it dispatched and fell back to the CPU for nothing.
  template <typename F>
  void on_device(F f) {
    const DeviceCounters before = *device_counters(*gpu_);
    f();
    const DeviceCounters& after = *device_counters(*gpu_);
    EXPECT_GT(after.dispatches, before.dispatches) << "nothing ran on " << device_;
    EXPECT_EQ(after.host_ops, before.host_ops) << "an operator ran on the CPU instead of " << device_;
  }
  // A device buffer holding v; read back with out().
  Act upload(Backend& be, const std::vector<float>& v) {
    Act a = be.alloc(static_cast<int64_t>(v.size()));
    be.copy(a, 0, be.host_view(v.data()), 0, 1, static_cast<int64_t>(v.size()));
    return a;
  }
  std::vector<float> out(Backend& be, Act a, size_t n) {
    std::vector<float> v(n);
    be.read(a, v.data(), static_cast<int64_t>(n));
    return v;
  }
  std::unique_ptr<Backend> cpu_, gpu_;
  std::string device_;
};

void expect_close(const std::vector<float>& got, const std::vector<float>& want, float rel, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; i++)
    if (!(std::fabs(got[i] - want[i]) <= rel * std::max(1.0f, std::fabs(want[i]))))
      ADD_FAILURE() << what << " [" << i << "]: device " << got[i] << ", cpu " << want[i] << " (" << ++bad << ")";
}

struct MatmulCase {
  GgmlType type;
  int64_t cols, rows;
};

class VulkanMatmul : public VulkanOps, public ::testing::WithParamInterface<GgmlType> {};

// y = x . W^T against the CPU backend: 1, 3 and 11 tokens on decode's row-parallel kernel (a partial and a
// full-plus-partial tile of 8), 16, 40 and 70 on prefill's tiled one (64 rows by 32 tokens: 70 rows are a
// full and a partial row tile, 70 tokens two full token tiles and a partial one).
TEST_P(VulkanMatmul, EqualsTheCpuBackend) {
  const GgmlType type = GetParam();
  const int64_t cols = traits(type).block_size >= 256
                           ? 512
                           : (type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16 ? 100 : 96),
                rows = 70;
  const auto wf = random_floats(static_cast<size_t>(rows * cols), 1, 0.5f);
  std::vector<uint8_t> bytes(row_bytes(type, cols) * rows);
  for (int64_t r = 0; r < rows; r++)
    quantize_row(type, wf.data() + r * cols, bytes.data() + r * row_bytes(type, cols), cols);
  const Weight w{"w", type, {cols, rows}, bytes.data(), bytes.size()};
  // |got - want| within rel of what rounding in another order can move — the row's sum of |w| * |x| — plus abs.
  auto expect_near_scale = [&](const std::vector<float>& got, const std::vector<float>& want,
                               const std::vector<float>& x, int64_t n, double rel, double abs, const char* what) {
    std::vector<float> deq(static_cast<size_t>(cols));
    for (int64_t t = 0; t < n; t++)
      for (int64_t r = 0; r < rows; r++) {
        dequantize_row(type, bytes.data() + r * row_bytes(type, cols), deq.data(), cols);
        double scale = 0;
        for (int64_t c = 0; c < cols; c++) scale += std::fabs(deq[c] * x[t * cols + c]);
        const size_t i = static_cast<size_t>(t * rows + r);
        EXPECT_NEAR(got[i], want[i], rel * scale + abs) << type_name(type) << ", " << what << " product, n=" << n
                                                        << " token " << t << " row " << r << " on " << device_;
      }
  };
  for (int64_t n : {1, 3, 11, 16, 40, 70}) {
    const auto x = random_floats(static_cast<size_t>(n * cols), 2 + static_cast<uint32_t>(n));
    const uint64_t tiled = device_counters(*gpu_)->tiled;
    std::vector<float> want(static_cast<size_t>(n * rows)), got(want.size());
    cpu_->matmul(w, cpu_->host_view(x.data()), n, cpu_->host_view(want.data()));
    const Weight gw = gpu_->prepare_weight(w);
    on_device([&] {
      Act gx = upload(*gpu_, x), gy = gpu_->alloc(n * rows);
      gpu_->matmul(gw, gx, n, gy);
      got = out(*gpu_, gy, want.size());
      gpu_->release(gx);
      gpu_->release(gy);
    });
    EXPECT_EQ(device_counters(*gpu_)->tiled - tiled, n >= kVulkanTiledTokens ? 1u : 0u)
        << "n=" << n << ": the tiled kernel runs from " << kVulkanTiledTokens << " tokens";
    expect_near_scale(got, want, x, n, 1e-4, 1e-6, "the device's");
    // Host memory in and out (a logits buffer): staged and copied back.
    std::vector<float> host_out(want.size());
    on_device([&] { gpu_->matmul(gw, gpu_->host_view(x.data()), n, gpu_->host_view(host_out.data())); });
    gpu_->read(gpu_->host_view(host_out.data()), host_out.data(), static_cast<int64_t>(host_out.size()));
    EXPECT_EQ(host_out, got) << type_name(type) << ": the same product into host memory";
  }
  // Prefill on the matrix units' tiles, through their plain-GLSL model (lavapipe has no cooperative matrices):
  // weights and activations rounded to fp16 (2^-11 each), so each term within 2^-10 of the CPU's, the sum
  // within 1.1e-3 of its sum of |terms|. Types without the path (F32, BF16, Q4_1, Q5_1) stay on the tiled kernel.
  CpuBackendOptions o;
  o.repack_weights = false;
  VulkanOptions vo;
  vo.coop = VulkanOptions::Coop::Emulated;
  const auto emu = make_vulkan_backend(vo, make_cpu_backend(1, o));
  EXPECT_THAT(emu->describe(), ::testing::HasSubstr("prefill on the cooperative-matrix model"));
  const bool has_coop =
      type != GgmlType::F32 && type != GgmlType::BF16 && type != GgmlType::Q4_1 && type != GgmlType::Q5_1;
  const Weight ew = emu->prepare_weight(w);
  for (int64_t n : {16, 40, 70}) {
    const auto x = random_floats(static_cast<size_t>(n * cols), 2 + static_cast<uint32_t>(n));
    std::vector<float> want(static_cast<size_t>(n * rows)), got(want.size());
    cpu_->matmul(w, cpu_->host_view(x.data()), n, cpu_->host_view(want.data()));
    const uint64_t coop = device_counters(*emu)->coop;
    emu->matmul(ew, emu->host_view(x.data()), n, emu->host_view(got.data()));
    emu->read(emu->host_view(got.data()), got.data(), static_cast<int64_t>(got.size()));
    EXPECT_EQ(device_counters(*emu)->coop - coop, has_coop ? 1u : 0u) << type_name(type) << " n=" << n;
    expect_near_scale(got, want, x, n, has_coop ? 1.1e-3 : 1e-4, 1e-5, "the cooperative-matrix model's");
  }
}

INSTANTIATE_TEST_SUITE_P(EveryDeviceType, VulkanMatmul,
                         ::testing::Values(GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
                                           GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q2_K,
                                           GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                                           GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4),
                         [](const auto& info) { return std::string(type_name(info.param)); });

// Per-head products over strided rows (MLA's absorbed keys and values), F16 and Q8_0 weights (the Q8_0
// activations rounded from the strided rows).
TEST_F(VulkanOps, PerHeadProductsOverStridedRows) {
  const int heads = 3;
  const int64_t cols = 64, rows = 24, n = 5, x_stride = heads * cols + 7, y_stride = heads * rows + 3;
  for (const GgmlType type : {GgmlType::F16, GgmlType::Q8_0}) {
    std::vector<std::vector<uint8_t>> bytes(heads);
    std::vector<Weight> ws;
    for (int h = 0; h < heads; h++) {
      const auto wf = random_floats(static_cast<size_t>(rows * cols), 70 + h);
      bytes[h].resize(row_bytes(type, cols) * rows);
      for (int64_t r = 0; r < rows; r++)
        quantize_row(type, wf.data() + r * cols, bytes[h].data() + r * row_bytes(type, cols), cols);
      ws.push_back({"head", type, {cols, rows}, bytes[h].data(), bytes[h].size()});
    }
    const auto x = random_floats(static_cast<size_t>(n * x_stride), 80);
    std::vector<float> want(static_cast<size_t>(n * y_stride)), got;
    cpu_->matmul_heads(ws.data(), heads, cpu_->host_view(x.data()), x_stride, cols, n, cpu_->host_view(want.data()),
                       y_stride, rows);
    on_device([&] {
      Act gx = upload(*gpu_, x), gy = gpu_->alloc(n * y_stride);
      gpu_->matmul_heads(ws.data(), heads, gx, x_stride, cols, n, gy, y_stride, rows);
      got = out(*gpu_, gy, want.size());
    });
    for (int64_t t = 0; t < n; t++)
      for (int64_t i = heads * rows; i < y_stride; i++) got[t * y_stride + i] = want[t * y_stride + i];  // gaps
    expect_close(got, want, 1e-4f, std::string(type_name(type)) + " heads");
  }
}

// A second step of the same shape (the same dispatches over the same buffers, its inputs staged in the same
// places) submits the command buffer recorded for the first: the counters say so, and its result is its own.
TEST_F(VulkanOps, AStepOfAShapeSeenBeforeReusesItsRecordedCommands) {
  const int64_t cols = 64, rows = 16, n = 2;
  const auto wf = random_floats(static_cast<size_t>(rows * cols), 50);
  const Weight w{"w", GgmlType::F32, {cols, rows}, wf.data(), wf.size() * 4};
  const Weight gw = gpu_->prepare_weight(w);
  Act h = gpu_->alloc(n * rows);
  for (int step = 0; step < 3; step++) {
    const auto x = random_floats(static_cast<size_t>(n * cols), 51 + static_cast<uint32_t>(step));
    std::vector<float> want(static_cast<size_t>(n * rows)), got(want.size());
    cpu_->matmul(w, cpu_->host_view(x.data()), n, cpu_->host_view(want.data()));
    cpu_->scale(cpu_->host_view(want.data()), n * rows, 0.5f);
    const DeviceCounters before = *device_counters(*gpu_);
    gpu_->matmul(gw, gpu_->host_view(x.data()), n, h);
    gpu_->scale(h, n * rows, 0.5f);
    gpu_->read(h, got.data(), n * rows);
    const DeviceCounters& after = *device_counters(*gpu_);
    EXPECT_EQ(after.submissions, before.submissions + 1);
    EXPECT_EQ(after.reused, before.reused + (step > 0 ? 1 : 0)) << "step " << step;
    expect_close(got, want, 1e-5f, "step " + std::to_string(step));
  }
}

// A matrix larger than one binding may span is uploaded in parts of whole rows, each its own dispatch, and
// activations are bound through windows: the same products.
TEST_F(VulkanOps, AMatrixLargerThanOneBindingRunsInParts) {
  make(4096);  // bytes per binding: 18 rows of 56 floats... a 40-row F32 matrix needs 3 parts
  const int64_t cols = 56, rows = 40, n = 5;
  const auto wf = random_floats(static_cast<size_t>(rows * cols), 3);
  const Weight w{"big", GgmlType::F32, {cols, rows}, wf.data(), wf.size() * 4};
  const auto x = random_floats(static_cast<size_t>(n * cols), 4);
  std::vector<float> want(static_cast<size_t>(n * rows)), got(want.size());
  cpu_->matmul(w, cpu_->host_view(x.data()), n, cpu_->host_view(want.data()));
  const DeviceCounters before = *device_counters(*gpu_);
  on_device([&] {
    Act gx = upload(*gpu_, x), gy = gpu_->alloc(n * rows);
    gpu_->matmul(gpu_->prepare_weight(w), gx, n, gy);
    got = out(*gpu_, gy, want.size());
  });
  EXPECT_GE(device_counters(*gpu_)->dispatches - before.dispatches, 1u + 3u);  // the copy in, three parts
  expect_close(got, want, 1e-5f, "F32 product in parts");
}

TEST_F(VulkanOps, RmsNormInPlaceAndPerHead) {
  const int64_t rows = 7, dim = 96;
  const auto x = random_floats(static_cast<size_t>(rows * dim), 5, 3.0f), w = random_floats(dim, 6);
  std::vector<float> want(x.size());
  rmsnorm_rows(x.data(), w.data(), want.data(), rows, dim, 1e-6f);
  std::vector<float> got;
  on_device([&] {
    Act a = upload(*gpu_, x);
    gpu_->rmsnorm(a, w.data(), a, rows, dim, 1e-6f);
    got = out(*gpu_, a, x.size());
  });
  expect_close(got, want, 1e-5f, "rmsnorm");
  // Per head (Qwen3's q/k norms): rows of 16 back to back.
  rmsnorm_rows(x.data(), w.data(), want.data(), rows * 6, 16, 1e-5f);
  on_device([&] {
    Act a = upload(*gpu_, x), b = gpu_->alloc(rows * dim);
    gpu_->rmsnorm(a, w.data(), b, rows * 6, 16, 1e-5f);
    got = out(*gpu_, b, x.size());
  });
  expect_close(got, want, 1e-5f, "per-head rmsnorm");
}

TEST_F(VulkanOps, RopeEveryStyleAndScaling) {
  const int heads = 3, head_dim = 16;
  const std::vector<int32_t> pos = {0, 5, 17, 4000};
  const auto rows = static_cast<int64_t>(pos.size());
  const std::vector<float> factors = {1, 1, 2, 4, 8, 8};
  std::vector<RopeParams> params;
  params.push_back({RopeStyle::Adjacent, 16, 10000.0f, 1.0f});
  params.push_back({RopeStyle::NeoX, 12, 500000.0f, 1.0f});  // partial rotation: the rest untouched
  RopeParams yarn{RopeStyle::NeoX, 16, 10000.0f, 0.25f};
  set_yarn(yarn, 4096);
  params.push_back(yarn);
  RopeParams longrope{RopeStyle::NeoX, 12, 10000.0f, 1.0f};
  longrope.freq_factors = factors.data();
  longrope.attn_factor = 1.19f;
  params.push_back(longrope);
  RopeParams inverse{RopeStyle::Adjacent, 16, 10000.0f, 1.0f};
  inverse.inverse = true;
  params.push_back(inverse);
  for (size_t k = 0; k < params.size(); k++) {
    const auto x = random_floats(static_cast<size_t>(rows * heads * head_dim), 7 + static_cast<uint32_t>(k));
    std::vector<float> want = x, got;
    rope_rows(want.data(), pos.data(), rows, heads, head_dim, params[k]);
    on_device([&] {
      Act a = upload(*gpu_, x);
      gpu_->rope(a, pos.data(), rows, heads, head_dim, params[k]);
      got = out(*gpu_, a, x.size());
    });
    expect_close(got, want, 1e-5f, "rope case " + std::to_string(k));
  }
}

TEST_F(VulkanOps, ElementWiseOperators) {
  const int64_t n = 5000;  // more than one row of workgroups
  const auto a = random_floats(n, 8, 4.0f), b = random_floats(n, 9);
  auto run = [&](const char* what, auto cpu_op, auto gpu_op) {
    std::vector<float> want = a, got;
    cpu_op(want.data());
    on_device([&] {
      Act x = upload(*gpu_, a), y = upload(*gpu_, b);
      gpu_op(x, y);
      got = out(*gpu_, x, a.size());
    });
    expect_close(got, want, 1e-5f, what);
  };
  run(
      "add", [&](float* x) { add_inplace(x, b.data(), n); }, [&](Act x, Act y) { gpu_->add(x, y, n); });
  run(
      "silu_mul", [&](float* x) { silu_mul(x, b.data(), n); }, [&](Act x, Act y) { gpu_->silu_mul(x, y, n); });
  run(
      "gelu_mul", [&](float* x) { gelu_mul(x, b.data(), n); }, [&](Act x, Act y) { gpu_->gelu_mul(x, y, n); });
  run(
      "scale", [&](float* x) { scale_inplace(x, n, 0.37f); }, [&](Act x, Act) { gpu_->scale(x, n, 0.37f); });
  run(
      "softcap", [&](float* x) { softcap_inplace(x, n, 3.0f); }, [&](Act x, Act) { gpu_->softcap(x, n, 3.0f); });
  run(
      "add_bias", [&](float* x) { add_bias_rows(x, b.data(), 50, 100); },
      [&](Act x, Act) { gpu_->add_bias(x, b.data(), 50, 100); });
  run(
      "fill", [&](float* x) { std::fill(x, x + n, -2.5f); }, [&](Act x, Act) { gpu_->fill(x, n, -2.5f); });
  run(
      "copy rows",
      [&](float* x) {
        for (int r = 0; r < 10; r++)
          for (int c = 0; c < 30; c++) x[r * 100 + c] = b[r * 40 + c];
      },
      [&](Act x, Act y) { gpu_->copy(x, 100, y, 40, 10, 30); });
}

// gather_rows in place (the output head's rows to the front) and into another buffer; the identity is free.
TEST_F(VulkanOps, GatherRowsInPlaceAndApart) {
  const int64_t dim = 40, n_rows = 12;
  const auto a = random_floats(static_cast<size_t>(n_rows * dim), 60);
  const std::vector<int64_t> rows = {3, 5, 9, 11};
  for (const bool in_place : {true, false}) {
    std::vector<float> want = a, other(a.size()), got;
    float* dst = in_place ? want.data() : other.data();
    cpu_->gather_rows(cpu_->host_view(dst), cpu_->host_view(want.data()), rows.data(), 4, dim);
    on_device([&] {
      Act x = upload(*gpu_, a), y = in_place ? x : gpu_->alloc(n_rows * dim);
      gpu_->gather_rows(y, x, rows.data(), 4, dim);
      got = out(*gpu_, y, a.size());
    });
    std::vector<float> w(in_place ? want : other);
    w.resize(static_cast<size_t>(4 * dim));
    got.resize(w.size());
    EXPECT_EQ(got, w) << (in_place ? "in place" : "apart");
  }
  const std::vector<int64_t> identity = {0, 1, 2};
  const uint64_t dispatches = device_counters(*gpu_)->dispatches;
  Act x = upload(*gpu_, a);
  gpu_->gather_rows(x, x, identity.data(), 3, dim);
  EXPECT_EQ(device_counters(*gpu_)->dispatches, dispatches + 1);  // the upload's copy only
}

// An operator with no shader (the embedding lookup) runs on the CPU after the recorded work finishes, on the
// same buffers: the counters say so and the result is the CPU's.
TEST_F(VulkanOps, OperatorsWithoutAShaderRunOnTheCpuAfterTheRecordedWork) {
  const int64_t dim = 32, vocab = 10;
  const auto table = random_floats(static_cast<size_t>(vocab * dim), 10);
  const Weight t{"token_embd.weight", GgmlType::F32, {dim, vocab}, table.data(), table.size() * 4};
  const std::vector<int32_t> tokens = {3, 7};
  Act x = gpu_->alloc(2 * dim);
  gpu_->fill(x, 2 * dim, 1.0f);  // recorded, then the embedding must land after it
  const uint64_t host_ops = device_counters(*gpu_)->host_ops;
  gpu_->embed(t, tokens.data(), 2, x);
  gpu_->scale(x, 2 * dim, 2.0f);
  EXPECT_EQ(device_counters(*gpu_)->host_ops, host_ops + 1);
  const auto got = out(*gpu_, x, 2 * dim);
  for (int i = 0; i < 2; i++)
    for (int c = 0; c < dim; c++) ASSERT_EQ(got[i * dim + c], 2.0f * table[tokens[i] * dim + c]);
}

// A MoE layer's experts (ffn_many): on the device, each expert's rows one product; under --cpu-moe on the CPU.
TEST_F(VulkanOps, MoeExpertsRunOnTheDeviceOrUnderCpuMoeOnTheCpu) {
  const int64_t dim = 64, width = 96;
  std::vector<std::vector<float>> mats;
  std::vector<Weight> ws;
  for (int i = 0; i < 6; i++) mats.push_back(random_floats(static_cast<size_t>(dim * width), 20 + i, 0.3f));
  for (int e = 0; e < 2; e++) {
    ws.push_back({"gate", GgmlType::F32, {dim, width}, mats[3 * e].data(), mats[3 * e].size() * 4});
    ws.push_back({"up", GgmlType::F32, {dim, width}, mats[3 * e + 1].data(), mats[3 * e + 1].size() * 4});
    ws.push_back({"down", GgmlType::F32, {width, dim}, mats[3 * e + 2].data(), mats[3 * e + 2].size() * 4});
  }
  for (auto& w : ws) w.routed_expert = true;
  const Backend::FfnRef ffns[2] = {{&ws[0], &ws[1], &ws[2]}, {&ws[3], &ws[4], &ws[5]}};
  const int64_t ns[2] = {3, 1};
  const auto x0 = random_floats(3 * dim, 30), x1 = random_floats(dim, 31);
  std::vector<float> w0(3 * dim), w1(dim);
  const Act cx[2] = {cpu_->host_view(x0.data()), cpu_->host_view(x1.data())};
  const Act cy[2] = {cpu_->host_view(w0.data()), cpu_->host_view(w1.data())};
  cpu_->ffn_many(ffns, 2, cx, ns, cy);
  for (const bool cpu_moe : {false, true}) {
    CpuBackendOptions o;
    o.repack_weights = false;
    VulkanOptions vo;
    vo.cpu_moe = cpu_moe;
    gpu_ = make_vulkan_backend(vo, make_cpu_backend(1, o));
    const Act gx[2] = {upload(*gpu_, x0), upload(*gpu_, x1)};
    const Act gy[2] = {gpu_->alloc(3 * dim), gpu_->alloc(dim)};
    const uint64_t host_ops = device_counters(*gpu_)->host_ops;
    gpu_->ffn_many(ffns, 2, gx, ns, gy);
    EXPECT_EQ(device_counters(*gpu_)->host_ops, host_ops + (cpu_moe ? 1 : 0)) << "cpu_moe " << cpu_moe;
    expect_close(out(*gpu_, gy[0], w0.size()), w0, 1e-4f, "expert 0");
    expect_close(out(*gpu_, gy[1], w1.size()), w1, 1e-4f, "expert 1");
  }
}

// The experts that are not plain SwiGLU, on the device too: gpt-oss's (a bias after each projection, its
// clamped SwiGLU with alpha), DeepSeek-V4's clamped SwiGLU, Gemma 4's GeGLU; each against the CPU backend.
TEST_F(VulkanOps, BiasedClampedAndGegluExpertsRunOnTheDevice) {
  const int64_t dim = 64, width = 96;
  std::vector<std::vector<float>> mats;
  for (int i = 0; i < 3; i++) mats.push_back(random_floats(static_cast<size_t>(dim * width), 50 + i, 0.5f));
  const std::vector<Weight> ws = {{"gate", GgmlType::F32, {dim, width}, mats[0].data(), mats[0].size() * 4},
                                  {"up", GgmlType::F32, {dim, width}, mats[1].data(), mats[1].size() * 4},
                                  {"down", GgmlType::F32, {width, dim}, mats[2].data(), mats[2].size() * 4}};
  const auto gate_b = random_floats(width, 53), up_b = random_floats(width, 54), down_b = random_floats(dim, 55);
  const int64_t n = 5;
  const auto x = random_floats(n * dim, 56, 2.0f);  // large enough that the clamps bite
  for (int kind = 0; kind < 3; kind++) {
    Backend::FfnRef f{&ws[0], &ws[1], &ws[2]};
    const char* name = kind == 0 ? "gpt-oss" : kind == 1 ? "clamped" : "geglu";
    if (kind == 0)
      f.gate_b = gate_b.data(), f.up_b = up_b.data(), f.down_b = down_b.data(), f.alpha = 1.702f, f.clamp = 3.0f;
    if (kind == 1) f.clamp = 2.0f;
    if (kind == 2) f.gelu = true;
    std::vector<float> want(n * dim);
    const Act cx = cpu_->host_view(x.data()), cy = cpu_->host_view(want.data());
    cpu_->ffn_many(&f, 1, &cx, &n, &cy);
    std::vector<float> got;
    on_device([&] {
      const Act gx = upload(*gpu_, x), gy = gpu_->alloc(n * dim);
      gpu_->ffn_many(&f, 1, &gx, &n, &gy);
      got = out(*gpu_, gy, want.size());
      gpu_->release(gx);
      gpu_->release(gy);
    });
    expect_close(got, want, 1e-4f, name);
  }
}

// Attention over a paged KV cache in device memory (Backend::kv_memory) against the CPU backend's over host
// rows written the same way: two sequences with their own block tables, GQA, prefill rows and a decode row
// past two 64-position chunks, F32, F16, BF16, Q8_0, FP8 and Q4 rows (the device's rows byte for byte the
// CPU's), with a sliding window, a soft-cap and sinks, and rows attended both ways (horizons past their position).
TEST_F(VulkanOps, AttentionOverThePagedKvCacheEqualsTheCpuBackend) {
  const int n_head = 4, n_kv = 2, hd = 32, block = 4, n_blocks = 64;
  const int64_t width = n_kv * hd, slots = int64_t{n_blocks} * block;
  const std::vector<float> sinks = {0.5f, -1.0f, 2.0f, 0.0f};
  for (const KvType type : {KvType::F32, KvType::F16, KvType::BF16, KvType::Q8_0, KvType::FP8, KvType::Q4}) {
    const KvRowFormat f(type, hd);
    const auto stride = static_cast<int64_t>(f.bytes(width));
    std::vector<uint8_t> hk(static_cast<size_t>(slots * stride)), hv(hk.size());
    const std::shared_ptr<void> dk = gpu_->kv_memory(0, hk.size(), "keys"),
                                dv = gpu_->kv_memory(0, hv.size(), "values");
    ASSERT_TRUE(dk && dv) << "no KV memory on " << device_;
    // Sequence 0 holds 150 positions in blocks 0..37 reversed; sequence 1 holds 9 in blocks 40.. in order.
    std::vector<int32_t> table0(38), table1(3);
    for (int b = 0; b < 38; b++) table0[b] = 37 - b;
    for (int b = 0; b < 3; b++) table1[b] = 40 + b;
    std::vector<int64_t> slot_list;
    for (int pos = 0; pos < 150; pos++) slot_list.push_back(int64_t{table0[pos / block]} * block + pos % block);
    for (int pos = 0; pos < 9; pos++) slot_list.push_back(int64_t{table1[pos / block]} * block + pos % block);
    const auto n_rows = static_cast<int64_t>(slot_list.size());
    const auto k = random_floats(static_cast<size_t>(n_rows * width), 40), v = random_floats(k.size(), 41);
    KvLayerWrite hw{hk.data(), hv.data(), stride, stride, width, width, f, f};
    KvLayerWrite dw{dk.get(), dv.get(), stride, stride, width, width, f, f};
    cpu_->write_kv(hw, slot_list.data(), n_rows, cpu_->host_view(k.data()), cpu_->host_view(v.data()));
    on_device([&] {
      Act gk = upload(*gpu_, k), gv = upload(*gpu_, v);
      gpu_->write_kv(dw, slot_list.data(), n_rows, gk, gv);
      gpu_->release(gk);
      gpu_->release(gv);
    });
    gpu_->read(gpu_->host_view(static_cast<float*>(nullptr)), nullptr, 0);  // the recorded writes done
    int differ = 0, differ_v = 0;
    for (const int64_t slot : slot_list) {
      differ += std::memcmp(hk.data() + slot * stride, static_cast<const uint8_t*>(dk.get()) + slot * stride,
                            static_cast<size_t>(stride)) != 0;
      differ_v += std::memcmp(hv.data() + slot * stride, static_cast<const uint8_t*>(dv.get()) + slot * stride,
                              static_cast<size_t>(stride)) != 0;
    }
    EXPECT_EQ(differ, 0) << kv_type_name(type) << ": key rows the device wrote unlike the CPU's";
    EXPECT_EQ(differ_v, 0) << kv_type_name(type) << ": value rows the device wrote unlike the CPU's";
    // Queries: sequence 0 at positions 147..149 (prefill rows) and sequence 1 at 8 (decode).
    const std::vector<int32_t> pos = {147, 148, 149, 8};
    const int32_t* tables[4] = {table0.data(), table0.data(), table0.data(), table1.data()};
    const auto q = random_floats(4 * n_head * hd, 42);
    // Variants 3 and 4: the prefill rows attended both ways (a media span's rows, seeing to its last, 149).
    const std::vector<int32_t> horizon = {149, 149, 149, 8};
    for (int variant = 0; variant < 5; variant++) {
      AttentionShape s{n_head, n_kv, hd, 1.0f / std::sqrt(static_cast<float>(hd))};
      if (variant == 1 || variant == 4) s.window = 70, s.softcap = 5.0f;
      if (variant == 2) s.sinks = sinks.data();
      const int32_t* horizons = variant >= 3 ? horizon.data() : nullptr;
      std::vector<float> want(4 * n_head * hd), got;
      const PagedKvLayerView hv_view{hk.data(), hv.data(), stride, stride, block, f, f};
      const PagedKvLayerView dv_view{dk.get(), dv.get(), stride, stride, block, f, f};
      cpu_->attention(hv_view, {4, cpu_->host_view(q.data()), cpu_->host_view(want.data()), pos.data(), tables, horizons},
                      s);
      on_device([&] {
        Act gq = upload(*gpu_, q), go = gpu_->alloc(static_cast<int64_t>(want.size()));
        gpu_->attention(dv_view, {4, gq, go, pos.data(), tables, horizons}, s);
        got = out(*gpu_, go, want.size());
      });
      expect_close(got, want, 2e-5f, std::string(kv_type_name(type)) + " variant " + std::to_string(variant));
    }
  }
}

// MLA's dense paths on the device: key rows read from the paged cache by position (all of a sequence's, or
// the ones an indexer picked) and attention over dense float rows (one block of every position), each against
// the CPU backend.
TEST_F(VulkanOps, DenseAttentionAndKvRowReadsRunOnTheDevice) {
  const int hd = 48, block = 4, n_blocks = 16, n_head = 2;
  const int64_t width = hd, slots = int64_t{n_blocks} * block;
  const KvRowFormat f(KvType::F32, hd);
  const auto stride = static_cast<int64_t>(f.bytes(width));
  const auto rows = random_floats(static_cast<size_t>(slots * width), 80);
  const std::shared_ptr<void> dk = gpu_->kv_memory(0, static_cast<size_t>(slots * stride), "keys");
  ASSERT_TRUE(dk);
  std::memcpy(dk.get(), rows.data(), static_cast<size_t>(slots * stride));
  std::vector<int32_t> table(n_blocks);
  for (int b = 0; b < n_blocks; b++) table[b] = n_blocks - 1 - b;
  const PagedKvLayerView hv{const_cast<float*>(rows.data()), nullptr, stride, 0, block, f, f};
  const PagedKvLayerView dv{dk.get(), nullptr, stride, 0, block, f, f};
  const int64_t len = 37;
  const std::vector<int32_t> picked = {36, 0, 17, 5, 30};
  std::vector<float> want(static_cast<size_t>(len * width)), want_p(picked.size() * width), got, got_p;
  cpu_->read_kv_rows(hv, table.data(), len, width, cpu_->host_view(want.data()));
  cpu_->gather_kv_rows(hv, table.data(), picked.data(), static_cast<int64_t>(picked.size()), width,
                       cpu_->host_view(want_p.data()));
  on_device([&] {
    Act a = gpu_->alloc(len * width), b = gpu_->alloc(static_cast<int64_t>(want_p.size()));
    gpu_->read_kv_rows(dv, table.data(), len, width, a);
    gpu_->gather_kv_rows(dv, table.data(), picked.data(), static_cast<int64_t>(picked.size()), width, b);
    got = out(*gpu_, a, want.size());
    got_p = out(*gpu_, b, want_p.size());
  });
  EXPECT_EQ(got, want);
  EXPECT_EQ(got_p, want_p);
  // Attention over the read rows as keys and values, queries at three positions.
  const std::vector<int32_t> pos = {36, 20, 3};
  const auto q = random_floats(pos.size() * n_head * hd, 81);
  const AttentionShape s{n_head, 1, hd, 0.2f};
  std::vector<float> want_o(pos.size() * n_head * hd), got_o;
  cpu_->attention_dense(cpu_->host_view(want.data()), cpu_->host_view(want.data()), width, width, len,
                        {3, cpu_->host_view(q.data()), cpu_->host_view(want_o.data()), pos.data(), nullptr}, s);
  on_device([&] {
    Act kv = upload(*gpu_, want), gq = upload(*gpu_, q), go = gpu_->alloc(static_cast<int64_t>(want_o.size()));
    gpu_->attention_dense(kv, kv, width, width, len, {3, gq, go, pos.data(), nullptr}, s);
    got_o = out(*gpu_, go, want_o.size());
  });
  expect_close(got_o, want_o, 2e-5f, "dense attention");
  // A whole image's attention (every row sees every row: horizons at the last), as the encoders run it.
  const std::vector<int32_t> all_pos = {0, 1, 2, 3, 4, 5}, all_last(6, 5);
  const auto q6 = random_floats(6 * n_head * hd, 82);
  std::vector<float> want6(6 * n_head * hd), got6;
  cpu_->attention_dense(cpu_->host_view(want.data()), cpu_->host_view(want.data()), width, width, 6,
                        {6, cpu_->host_view(q6.data()), cpu_->host_view(want6.data()), all_pos.data(), nullptr,
                         all_last.data()},
                        s);
  on_device([&] {
    Act kv = upload(*gpu_, std::vector<float>(want.begin(), want.begin() + 6 * width)), gq = upload(*gpu_, q6),
        go = gpu_->alloc(static_cast<int64_t>(want6.size()));
    gpu_->attention_dense(kv, kv, width, width, 6, {6, gq, go, all_pos.data(), nullptr, all_last.data()}, s);
    got6 = out(*gpu_, go, want6.size());
  });
  expect_close(got6, want6, 2e-5f, "dense attention both ways");
}

// Greedy sampling on the device: each row's argmax equals kernels/ops.h's (the first of equal maxima; NaNs never
// win; x[0] a NaN gives 0), over a vocabulary-sized row, a short one, ties across the workgroup's stripes,
// all -inf and a row of NaNs; the ids land in host memory.
TEST_F(VulkanOps, ArgmaxOfEachRowEqualsTheHostsRule) {
  ASSERT_TRUE(gpu_->best_on_device());
  ASSERT_FALSE(cpu_->best_on_device());
  for (int64_t n : {151936, 7, 1000}) {
    const int64_t rows = 6;
    auto x = random_floats(static_cast<size_t>(rows * n), 40 + static_cast<uint32_t>(n));
    float* r1 = x.data() + n;  // ties: the same maximum in several stripes (the first must win)
    const float top = 100.0f;
    for (int64_t i : {n - 1, n / 2, int64_t{3}}) r1[std::min(i, n - 1)] = top;
    float* r2 = x.data() + 2 * n;
    std::fill(r2, r2 + n, -INFINITY);
    float* r3 = x.data() + 3 * n;
    std::fill(r3, r3 + n, NAN);
    float* r4 = x.data() + 4 * n;  // NaNs beside the maximum
    r4[0] = NAN;
    if (n > 2) r4[n - 1] = 1e9f, r4[n - 2] = NAN;
    float* r5 = x.data() + 5 * n;  // a NaN before the maximum, not first
    r5[n - 1] = 1e9f;
    r5[n / 2] = NAN;
    std::vector<int32_t> want(rows), got(rows, -1);
    for (int64_t r = 0; r < rows; r++) want[static_cast<size_t>(r)] = argmax(x.data() + r * n, n);
    const uint64_t before = device_counters(*gpu_)->argmax_rows;
    on_device([&] {
      Act gx = upload(*gpu_, x);
      gpu_->argmax_rows(gx, rows, n, got.data());
      gpu_->release(gx);
    });
    EXPECT_EQ(got, want) << "n=" << n << " on " << device_;
    EXPECT_EQ(device_counters(*gpu_)->argmax_rows - before, static_cast<uint64_t>(rows));
  }
}

// MoE routing on the device against kernels/moe_route.cpp, each family's rule: softmax top-k (Mixtral, Qwen),
// DeepSeek-V3's sigmoid with a selection bias, 8 groups of which 4 are eligible, renormalised and scaled,
// gpt-oss's softmax over the chosen logits, Llama 4's choice by the raw logit, DeepSeek-V4's sqrt(softplus)
// with experts forced by the token. The chosen ids are equal; the weights within 1e-5 (exp of another library).
TEST_F(VulkanOps, MoeRoutingEqualsTheCpuRulesForEveryGating) {
  struct Case {
    const char* name;
    MoeRouting r;
    bool bias;
  };
  std::vector<Case> cases(5);
  cases[0] = {"softmax top-2 of 8", {}, false};
  cases[0].r.n_expert = 8, cases[0].r.n_used = 2;
  cases[1] = {"sigmoid + bias, groups", {}, true};
  cases[1].r.n_expert = 256, cases[1].r.n_used = 8, cases[1].r.gating = ExpertGating::Sigmoid;
  cases[1].r.n_group = 8, cases[1].r.n_group_used = 4, cases[1].r.normalize = true, cases[1].r.scale = 2.5f;
  cases[2] = {"softmax weight", {}, false};
  cases[2].r.n_expert = 32, cases[2].r.n_used = 4, cases[2].r.gating = ExpertGating::SoftmaxWeight;
  cases[3] = {"by logit", {}, false};
  cases[3].r.n_expert = 16, cases[3].r.n_used = 1, cases[3].r.gating = ExpertGating::Sigmoid;
  cases[3].r.select_by_logit = true;
  cases[4] = {"sqrt softplus, forced", {}, false};
  cases[4].r.n_expert = 64, cases[4].r.n_used = 6, cases[4].r.gating = ExpertGating::SqrtSoftplus;
  cases[4].r.normalize = true, cases[4].r.scale = 1.5f;
  const int64_t n = 37;
  for (Case& c : cases) {
    const MoeRouting& r = c.r;
    auto logits = random_floats(static_cast<size_t>(n * r.n_expert), 90 + r.n_expert, 3.0f);
    logits[5] = 25.0f;  // softplus's linear branch
    const auto bias = random_floats(static_cast<size_t>(r.n_expert), 91, 0.1f);
    std::vector<int32_t> forced(static_cast<size_t>(n * r.n_used));
    for (size_t i = 0; i < forced.size(); i++) forced[i] = static_cast<int32_t>((i * 7 + i / 3) % r.n_expert);
    if (r.gating == ExpertGating::SqrtSoftplus) c.r.forced = forced.data();
    const size_t picks = static_cast<size_t>(n * r.n_used);
    std::vector<int32_t> want_ids(picks), got_ids(picks, -1);
    std::vector<float> want_w(picks), got_w(picks), scratch(2 * static_cast<size_t>(r.n_expert));
    moe_route(r, logits.data(), c.bias ? bias.data() : nullptr, n, want_ids.data(), want_w.data(), scratch.data());
    const uint64_t before = device_counters(*gpu_)->routed;
    on_device([&] {
      Act gl = upload(*gpu_, logits);
      gpu_->moe_route(r, gl, c.bias ? bias.data() : nullptr, n, got_ids.data(), got_w.data());
      gpu_->release(gl);
    });
    EXPECT_EQ(device_counters(*gpu_)->routed - before, static_cast<uint64_t>(n)) << c.name;
    EXPECT_EQ(got_ids, want_ids) << c.name << " on " << device_;
    for (size_t i = 0; i < picks; i++)
      EXPECT_NEAR(got_w[i], want_w[i], 1e-5f * std::max(1.0f, std::fabs(want_w[i]))) << c.name << " pick " << i;
  }
}

// Sampling's top-k on the device: each row's k best equal kernels/ops.h top_k's (value descending, ties by
// the lower index, NaNs left out), over a vocabulary-sized row and a short one, for k from 1 to 64.
TEST_F(VulkanOps, TopKOfEachRowEqualsTheHostsOrder) {
  for (int64_t n : {151936, 100}) {
    const int64_t rows = 3;
    auto x = random_floats(static_cast<size_t>(rows * n), 60 + static_cast<uint32_t>(n));
    float* r1 = x.data() + n;  // ties among the best, NaNs among them
    for (int64_t i : {n - 1, n / 2, int64_t{7}, int64_t{3}}) r1[i] = 50.0f;
    r1[n / 3] = NAN, r1[0] = NAN;
    for (int k : {1, 5, 40, 64}) {
      std::vector<int32_t> want_ids(static_cast<size_t>(rows * k)), got_ids(want_ids.size(), -2);
      std::vector<float> want_vals(want_ids.size()), got_vals(want_ids.size());
      for (int64_t r = 0; r < rows; r++)
        top_k(x.data() + r * n, n, k, want_ids.data() + r * k, want_vals.data() + r * k);
      const uint64_t before = device_counters(*gpu_)->top_k_rows;
      on_device([&] {
        Act gx = upload(*gpu_, x);
        gpu_->top_k_rows(gx, rows, n, k, got_ids.data(), got_vals.data());
        gpu_->release(gx);
      });
      EXPECT_EQ(got_ids, want_ids) << "n=" << n << " k=" << k << " on " << device_;
      EXPECT_EQ(got_vals, want_vals) << "n=" << n << " k=" << k;
      EXPECT_EQ(device_counters(*gpu_)->top_k_rows - before, static_cast<uint64_t>(rows));
    }
  }
}

// A step that fails midway (an exception; its requests fail): what it queued is dropped, not run with the next
// step's work (it would write into cache rows the failed requests gave back), and the host memory it staged an
// output for is never written. The backend goes on working.
TEST_F(VulkanOps, AFailedStepsQueuedWorkIsDroppedNotRunLater) {
  const int64_t n = 100;
  const auto a = random_floats(n, 70), b = random_floats(n, 71);
  Act ga = upload(*gpu_, a), gb = upload(*gpu_, b);
  ASSERT_EQ(out(*gpu_, ga, n), a);
  std::vector<float> host(n, -7.0f);
  gpu_->add(ga, gb, n);                                      // queued: ga += gb
  gpu_->copy(gpu_->host_view(host.data()), n, gb, n, 1, n);  // queued: into host memory, through staging
  gpu_->abandon();
  EXPECT_EQ(out(*gpu_, ga, n), a) << "the failed step's add ran later";
  EXPECT_EQ(host, std::vector<float>(n, -7.0f)) << "the failed step's staged output was copied back";
  on_device([&] { gpu_->add(ga, gb, n); });
  const auto sum = out(*gpu_, ga, n);
  for (int64_t i = 0; i < n; i++) ASSERT_EQ(sum[i], a[i] + b[i]);
  gpu_->release(ga);
  gpu_->release(gb);
}

TEST(VulkanDevice, BadDeviceValuesAndIndicesAreNamed) {
  EXPECT_EQ(parse_device("cpu"), -1);
  EXPECT_EQ(parse_device("vulkan"), 0);
  EXPECT_EQ(parse_device("vulkan:2"), 2);
  for (const char* bad : {"gpu", "vulkan:", "vulkan:x", "vulkan:-1", "cuda"}) {
    try {
      parse_device(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
  try {
    VulkanOptions vo;
    vo.device = 99;
    make_vulkan_backend(vo, make_cpu_backend(1));
    ADD_FAILURE() << "device 99 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vulkan:99"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kestrel

// Every SIMD kernel against its scalar reference on odd shapes, the block
// formats against hand-computed values, and fp16/bf16 conversions.
#include <gtest/gtest.h>

#include <cerrno>
#include <cmath>
#include <iostream>
#include <random>

#include "formats/block_formats.h"
#include "formats/fp16.h"
#include "backend/backend.h"
#include "kernels/dot.h"
#include "kernels/gemm_bf16.h"
#include "kernels/gemm_float.h"
#include "kernels/gemm_q8.h"
#include "kernels/isa_dispatch.h"
#include "kernels/matmul.h"
#include "kernels/matmul_kernels.h"
#include "test_support.h"

namespace kestrel {
namespace {

using test::random_floats;

TEST(Fp16, ConversionsMatchKnownValues) {
  EXPECT_EQ(fp32_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(fp32_to_fp16(-2.0f), 0xC000);
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7BFF);
  EXPECT_EQ(fp32_to_fp16(1e6f), 0x7C00);  // overflow to infinity
  EXPECT_EQ(fp32_to_fp16(5.9604645e-8f), 0x0001);  // smallest subnormal
  EXPECT_EQ(fp16_to_fp32(0x3555), 0.333251953125f);
  EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(NAN))));
  for (uint32_t h = 0; h < 0x7C00; h++) EXPECT_EQ(fp32_to_fp16(fp16_to_fp32(static_cast<uint16_t>(h))), h);
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(bf16_to_fp32(0x4049), 3.140625f);
  EXPECT_EQ(fp32_to_bf16(1.00390625f), 0x3F80);  // tie rounds to even
}

TEST(BlockFormats, Q8_0MatchesHandComputedBlock) {
  std::vector<float> x(32);
  for (int i = 0; i < 32; i++) x[i] = static_cast<float>(i - 16) * 0.5f;  // max |x| = 8
  BlockQ8_0 b;
  quantize_row_q8_0_ref(x.data(), &b, 32);
  EXPECT_EQ(b.d, fp32_to_fp16(8.0f / 127.0f));
  EXPECT_EQ(b.qs[0], -127);
  EXPECT_EQ(b.qs[16], 0);
  EXPECT_EQ(b.qs[31], static_cast<int8_t>(std::roundf(7.5f * 127.0f / 8.0f)));
  std::vector<float> y(32);
  dequantize_row_q8_0(&b, y.data(), 32);
  for (int i = 0; i < 32; i++) EXPECT_NEAR(y[i], x[i], 8.0f / 127.0f);
}

TEST(BlockFormats, Q4_0MatchesHandComputedBlock) {
  std::vector<float> x(32, 0.0f);
  x[0] = -8.0f;  // largest magnitude, negative: d = -8 / -8 = 1
  x[1] = 7.0f;
  x[17] = 3.0f;
  BlockQ4_0 b;
  quantize_row_q4_0_ref(x.data(), &b, 32);
  EXPECT_EQ(b.d, fp32_to_fp16(1.0f));
  EXPECT_EQ(b.qs[0] & 0x0F, 0);   // -8 + 8
  EXPECT_EQ(b.qs[1] & 0x0F, 15);  // 7 + 8
  EXPECT_EQ(b.qs[1] >> 4, 11);    // element 17: 3 + 8
  EXPECT_EQ(b.qs[2] & 0x0F, 8);   // zero
  std::vector<float> y(32);
  dequantize_row_q4_0(&b, y.data(), 32);
  for (int i = 0; i < 32; i++) EXPECT_EQ(y[i], x[i]);
}

// Each SIMD table this CPU can run, by ISA level.
struct SimdCase {
  IsaLevel isa;
  bool vnni;  // the AVX-512 table with VNNI quantized dots
  int64_t n;
};

std::string simd_name(const SimdCase& c) { return std::string(isa_name(c.isa)) + (c.vnni ? "vnni" : ""); }
void PrintTo(const SimdCase& c, std::ostream* os) { *os << simd_name(c) << "/" << c.n; }

class DotKernelsVsScalar : public ::testing::TestWithParam<SimdCase> {
 protected:
  void SetUp() override {
    const auto& f = cpu_features();
    const bool runnable = GetParam().isa == IsaLevel::Avx2
                              ? (f.avx2 && f.fma && f.f16c)
                              : (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && (!GetParam().vnni || f.avx512vnni));
    simd_ = GetParam().isa == IsaLevel::Avx2 ? avx2_dot_kernels()
            : GetParam().vnni                ? avx512vnni_dot_kernels()
                                             : avx512_dot_kernels();
    if (!simd_ || !runnable) GTEST_SKIP() << simd_name(GetParam()) << " kernels cannot run on this CPU/build";
  }
  const DotKernels* simd_ = nullptr;
};

TEST_P(DotKernelsVsScalar, FloatFormats) {
  const int64_t n = GetParam().n;
  const DotKernels& ref = scalar_dot_kernels();
  const auto w = random_floats(n, 1), x = random_floats(n, 2);
  std::vector<uint16_t> h(n), bf(n);
  for (int64_t i = 0; i < n; i++) {
    h[i] = fp32_to_fp16(w[i]);
    bf[i] = fp32_to_bf16(w[i]);
  }
  const float tol = 1e-5f * static_cast<float>(n);
  EXPECT_NEAR(simd_->dot_f32(w.data(), x.data(), n), ref.dot_f32(w.data(), x.data(), n), tol);
  EXPECT_NEAR(simd_->dot_f16_f32(h.data(), x.data(), n), ref.dot_f16_f32(h.data(), x.data(), n), tol);
  EXPECT_NEAR(simd_->dot_bf16_f32(bf.data(), x.data(), n), ref.dot_bf16_f32(bf.data(), x.data(), n), tol);
}

TEST_P(DotKernelsVsScalar, QuantizedFormats) {
  const int64_t n = GetParam().n / 32 * 32 + 32;  // block formats: whole blocks
  const DotKernels& ref = scalar_dot_kernels();
  const auto w = random_floats(n, 3), x = random_floats(n, 4, 5.0f);
  std::vector<BlockQ8_0> wq8(n / 32), xq_ref(n / 32), xq_simd(n / 32);
  std::vector<BlockQ4_0> wq4(n / 32);
  quantize_row_q8_0_ref(w.data(), wq8.data(), n);
  quantize_row_q4_0_ref(w.data(), wq4.data(), n);
  ref.quantize_q8_0(x.data(), xq_ref.data(), n);
  simd_->quantize_q8_0(x.data(), xq_simd.data(), n);
  for (int64_t b = 0; b < n / 32; b++) {
    ASSERT_EQ(xq_ref[b].d, xq_simd[b].d) << "block " << b;
    for (int j = 0; j < 32; j++) ASSERT_EQ(xq_ref[b].qs[j], xq_simd[b].qs[j]) << "block " << b << " element " << j;
  }
  const float tol = 1e-4f * static_cast<float>(n);
  EXPECT_NEAR(simd_->dot_q8_0_q8_0(wq8.data(), xq_ref.data(), n), ref.dot_q8_0_q8_0(wq8.data(), xq_ref.data(), n), tol);
  EXPECT_NEAR(simd_->dot_q4_0_q8_0(wq4.data(), xq_ref.data(), n), ref.dot_q4_0_q8_0(wq4.data(), xq_ref.data(), n), tol);
  // Every SIMD table sums in ggml's order, so they agree with each other bit for bit.
  const DotKernels& avx2 = *avx2_dot_kernels();
  EXPECT_EQ(simd_->dot_q8_0_q8_0(wq8.data(), xq_ref.data(), n), avx2.dot_q8_0_q8_0(wq8.data(), xq_ref.data(), n));
  EXPECT_EQ(simd_->dot_q4_0_q8_0(wq4.data(), xq_ref.data(), n), avx2.dot_q4_0_q8_0(wq4.data(), xq_ref.data(), n));
}

std::vector<SimdCase> simd_cases() {
  std::vector<SimdCase> cases;
  for (auto [isa, vnni] : {std::pair{IsaLevel::Avx2, false}, {IsaLevel::Avx512, false}, {IsaLevel::Avx512, true}})
    for (int64_t n : {1, 7, 8, 15, 16, 17, 31, 32, 33, 64, 100, 255, 4096, 11008}) cases.push_back({isa, vnni, n});
  return cases;
}

TEST_P(DotKernelsVsScalar, ExpSumAndAxpy) {
  const int64_t n = GetParam().n;
  const DotKernels& ref = scalar_dot_kernels();
  auto a = random_floats(n, 7, 10.0f), b = a;
  const float m = 3.0f;
  const float sa = ref.exp_sum_f32(a.data(), m, n), sb = simd_->exp_sum_f32(b.data(), m, n);
  EXPECT_NEAR(sb, sa, 1e-5f * std::fabs(sa) + 1e-30f);
  for (int64_t i = 0; i < n; i++) ASSERT_NEAR(b[i], a[i], 2e-6f * a[i] + 1e-37f) << i;
  auto y1 = random_floats(n, 8), y2 = y1;
  const auto x = random_floats(n, 9);
  ref.axpy_f32(y1.data(), 0.37f, x.data(), n);
  simd_->axpy_f32(y2.data(), 0.37f, x.data(), n);
  for (int64_t i = 0; i < n; i++) ASSERT_NEAR(y2[i], y1[i], 1e-6f) << i;
}

INSTANTIATE_TEST_SUITE_P(Lengths, DotKernelsVsScalar, ::testing::ValuesIn(simd_cases()), [](const auto& info) {
  return simd_name(info.param) + "_" + std::to_string(info.param.n);
});

TEST(Matmul, EveryFormatAgreesWithDequantizedFloatMatmul) {
  // Odd shapes: 3 tokens, 37 output rows, 96 inputs; single-thread and two-thread pools.
  const int64_t n = 3, rows = 37, cols = 96;
  const auto wf = random_floats(rows * cols, 5), x = random_floats(n * cols, 6);
  for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0}) {
    std::vector<uint8_t> bytes(row_bytes(type, cols) * rows);
    for (int64_t r = 0; r < rows; r++) quantize_row(type, wf.data() + r * cols, bytes.data() + r * row_bytes(type, cols), cols);
    const Weight w{"w", type, {cols, rows}, bytes.data(), bytes.size(), {}};
    for (int threads : {1, 2}) {
      ThreadPool pool(threads);
      Matmul mm;
      std::vector<float> y(n * rows);
      mm.run(pool, w, x.data(), n, y.data());
      std::vector<float> wr(cols);
      // BF16 weights on the vdpbf16ps path meet activations rounded to BF16, and
      // F16 weights activations rounded to F16 (as in llama.cpp).
      const bool bf16_acts = matmul_kernels().find(type)->prep == ActPrep::Bf16;
      const bool f16_acts = type == GgmlType::F16;
      for (int64_t r = 0; r < rows; r++) {
        dequantize_weight_row(w, r, wr.data());
        for (int64_t t = 0; t < n; t++) {
          double ref = 0;
          for (int64_t c = 0; c < cols; c++) {
            const float xv = x[t * cols + c];
            const float rounded = bf16_acts  ? bf16_to_fp32(fp32_to_bf16(xv))
                                  : f16_acts ? fp16_to_fp32(fp32_to_fp16(xv))
                                             : xv;
            ref += static_cast<double>(wr[c]) * rounded;
          }
          // Quantized formats also quantize the activations: allow for that.
          const double tol = (type == GgmlType::Q8_0 || type == GgmlType::Q4_0) ? 0.15 : 1e-3;
          EXPECT_NEAR(y[t * rows + r], ref, tol) << type_name(type) << " row " << r << " token " << t;
        }
      }
    }
  }
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {


TEST(GemmQ8, TilesEqualTheRowDotsBitForBit) {
  const Int8Tiles* tiles = int8_tiles();
  if (!tiles) GTEST_SKIP() << "no AVX-512 VNNI on this CPU/build";
  const DotKernels& ref = *avx2_dot_kernels();  // sums in ggml's order, like the tiles
  const int64_t cols = 96, nb = cols / 32;
  for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_0}) {
    for (int64_t rows : {1, 2, 3, 5, 8, 9, 13, 37}) {
      for (int64_t n : {1, 2, 3, 4, 5, 7, 9, 70}) {
        const auto wf = random_floats(rows * cols, 11 + rows), x = random_floats(n * cols, 13 + n, 3.0f);
        const size_t rb = row_bytes(type, cols);
        std::vector<uint8_t> w(rb * rows);
        for (int64_t r = 0; r < rows; r++) quantize_row(type, wf.data() + r * cols, w.data() + r * rb, cols);
        std::vector<BlockQ8_0> xq(n * nb);
        for (int64_t t = 0; t < n; t++) ref.quantize_q8_0(x.data() + t * cols, xq.data() + t * nb, cols);
        std::vector<int32_t> sums(n * nb * 8);
        tiles->lane_sums(xq.data(), n * nb, sums.data());
        std::vector<float> y(n * rows, -1.0f);
        tiles->gemm(type, w.data(), rb, 0, rows, {xq.data(), sums.data(), n, nb}, y.data(), rows, 64);
        for (int64_t r = 0; r < rows; r++)
          for (int64_t t = 0; t < n; t++) {
            const float want = type == GgmlType::Q8_0
                                   ? ref.dot_q8_0_q8_0(reinterpret_cast<const BlockQ8_0*>(w.data() + r * rb), xq.data() + t * nb, cols)
                                   : ref.dot_q4_0_q8_0(reinterpret_cast<const BlockQ4_0*>(w.data() + r * rb), xq.data() + t * nb, cols);
            ASSERT_EQ(y[t * rows + r], want) << type_name(type) << " rows " << rows << " tokens " << n << " at (" << r << "," << t << ")";
          }
      }
    }
  }
}

void expect_float_tiles_agree(const FloatTiles& tiles) {
  std::cout << "[ path     ] float tiles: " << tiles.isa << "\n";
  const DotKernels& ref = scalar_dot_kernels();
  for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) {
    for (int64_t cols : {1, 15, 16, 37, 100}) {
      for (int64_t rows : {1, 3, 4, 9}) {
        for (int64_t n : {2, 3, 5, 70}) {
          const auto wf = random_floats(rows * cols, 21), x = random_floats(n * cols, 22);
          const size_t rb = row_bytes(type, cols);
          std::vector<uint8_t> w(rb * rows);
          for (int64_t r = 0; r < rows; r++) quantize_row(type, wf.data() + r * cols, w.data() + r * rb, cols);
          std::vector<float> y(n * rows);
          tiles.gemm(type, w.data(), rb, cols, 0, rows, x.data(), n, y.data(), rows, 64);
          for (int64_t r = 0; r < rows; r++)
            for (int64_t t = 0; t < n; t++) {
              const void* wr = w.data() + r * rb;
              const float* xt = x.data() + t * cols;
              const float want = type == GgmlType::F32   ? ref.dot_f32(static_cast<const float*>(wr), xt, cols)
                                 : type == GgmlType::F16 ? ref.dot_f16_f32(static_cast<const uint16_t*>(wr), xt, cols)
                                                         : ref.dot_bf16_f32(static_cast<const uint16_t*>(wr), xt, cols);
              ASSERT_NEAR(y[t * rows + r], want, 1e-4 * (1 + cols)) << type_name(type) << " " << rows << "x" << cols << " n=" << n;
            }
        }
      }
    }
  }
}

// BF16 batches on CPUs without the bf16 dot: every output bit for bit the ISA's row dot (ggml's order), so
// a row's logits do not depend on the batch it ran in, and the BF16 compat cells hold at every batch size.
TEST(GemmFloat, Bf16TilesKeepTheRowDotsOrderBitForBit) {
  bool ran = false;
  for (IsaLevel isa : {IsaLevel::Avx2, IsaLevel::Avx512}) {
    const FloatTiles* tiles = float_tiles(isa);
    if (!tiles || !tiles->bf16_in_dot_order) continue;
    ran = true;
    std::cout << "[ path     ] bf16 in dot order: " << tiles->isa << "\n";
    const DotKernels& dots = dot_kernels_for(isa);
    for (int64_t cols : {1, 15, 16, 37, 100, 256, 263})
      for (int64_t rows : {1, 3})
        for (int64_t n : {1, 2, 3, 5, 70}) {
          const auto wf = random_floats(rows * cols, 31), x = random_floats(n * cols, 32);
          std::vector<uint16_t> w(rows * cols);
          for (size_t i = 0; i < w.size(); i++) w[i] = fp32_to_bf16(wf[i]);
          std::vector<float> y(n * rows, -1.0f);
          tiles->bf16_in_dot_order(reinterpret_cast<const uint8_t*>(w.data()), cols * 2, cols, 0, rows, x.data(), n,
                                   y.data(), rows, 4);
          for (int64_t r = 0; r < rows; r++)
            for (int64_t t = 0; t < n; t++)
              ASSERT_EQ(y[t * rows + r], dots.dot_bf16_f32(w.data() + r * cols, x.data() + t * cols, cols))
                  << rows << "x" << cols << " n=" << n << " at (" << r << "," << t << ")";
        }
  }
  if (!ran) GTEST_SKIP() << "no AVX2 float tiles on this CPU/build";
}

// ggml's f32 and f16 row dots (ggml_vec_dot_f32/_f16) as a scalar model, for a vector of L lanes (AVX2: 8,
// AVX-512 without AVX512-FP16: 16): 4 accumulators over 4L-element steps (lane j of accumulator a: fused
// products of elements 4Ls + La + j), GGML_F32xL_REDUCE's (a0 + a2) + (a1 + a3), the vector's horizontal
// sum (`reduce_lanes`), then the leftovers one at a time (f32: in float; f16: in double).
template <int L, class W>
float ggml_row_dot(const W* w, const float* x, int64_t n, float (*widen)(W), bool double_tail,
                   float (*reduce_lanes)(const float*)) {
  float acc[4][L] = {};
  int64_t i = 0;
  for (; i + 4 * L <= n; i += 4 * L)
    for (int a = 0; a < 4; a++)
      for (int j = 0; j < L; j++) acc[a][j] = std::fma(widen(w[i + L * a + j]), x[i + L * a + j], acc[a][j]);
  float v[L];
  for (int j = 0; j < L; j++) v[j] = (acc[0][j] + acc[2][j]) + (acc[1][j] + acc[3][j]);
  const float reduced = reduce_lanes(v);
  if (double_tail) {
    double sum = reduced;
    for (; i < n; i++) sum += static_cast<double>(widen(w[i]) * x[i]);
    return static_cast<float>(sum);
  }
  float sum = reduced;
  for (; i < n; i++) sum += widen(w[i]) * x[i];
  return sum;
}

// GGML_F32x8_REDUCE's end: the 128-bit halves added, then two hadds: (v0 + v1) + (v2 + v3).
float ggml_hadd_reduce8(const float* v) {
  float h[4];
  for (int j = 0; j < 4; j++) h[j] = v[j] + v[j + 4];
  return (h[0] + h[1]) + (h[2] + h[3]);
}

// GCC's _mm512_reduce_add_ps: 256-bit halves, 128-bit halves, lanes {2,3,0,1}, the last two.
float gcc_reduce_add16(const float* v) {
  float h8[8], h4[4];
  for (int j = 0; j < 8; j++) h8[j] = v[j + 8] + v[j];
  for (int j = 0; j < 4; j++) h4[j] = h8[j + 4] + h8[j];
  return (h4[0] + h4[2]) + (h4[1] + h4[3]);
}

// The level's f32 and f16 row dots against the model, on lengths with and without leftovers.
template <int L>
void expect_row_dots_in_ggmls_order(const DotKernels& dots, float (*reduce_lanes)(const float*), uint32_t seed) {
  for (int64_t n : {4 * L, 8 * L, 256, 4 * L + 256, 40}) {
    const auto wf = random_floats(n, seed), x = random_floats(n, seed + 1);
    std::vector<uint16_t> wh(n);
    for (int64_t i = 0; i < n; i++) wh[i] = fp32_to_fp16(wf[i]);
    const float f32 = ggml_row_dot<L, float>(wf.data(), x.data(), n, [](float v) { return v; }, false, reduce_lanes);
    const float f16 = ggml_row_dot<L, uint16_t>(wh.data(), x.data(), n, [](uint16_t v) { return fp16_to_fp32(v); },
                                                true, reduce_lanes);
    EXPECT_EQ(dots.dot_f32(wf.data(), x.data(), n), f32) << n;
    EXPECT_EQ(dots.dot_f16_f32(wh.data(), x.data(), n), f16) << n;
  }
}

TEST(DotKernels, Avx2FloatRowDotsInGgmlsOrderBitForBit) {
  const DotKernels* avx2 = avx2_dot_kernels();
  if (!avx2 || !isa_runs(IsaNeed::Avx2)) GTEST_SKIP() << "no AVX2 on this CPU/build";
  expect_row_dots_in_ggmls_order<8>(*avx2, ggml_hadd_reduce8, 51);
}

TEST(DotKernels, Avx512FloatRowDotsInGgmlsOrderBitForBit) {
  if (!isa_runs(IsaNeed::Avx512)) GTEST_SKIP() << "no AVX-512 on this CPU/build";
  expect_row_dots_in_ggmls_order<16>(dot_kernels_for(IsaLevel::Avx512), gcc_reduce_add16, 53);
}

// F16 rows shorter than the dot's SIMD step (a LoRA's B: rank columns) are all tail: products in float summed in
// double. Summed 8 rows at a time (AVX-512's transposed columns; matmul_kernels.cpp's interleaved loop elsewhere),
// every output is bit for bit the row dot's, through the backend's matmul too.
TEST(DotKernels, ShortF16RowsSeveralAtATimeBitForBitTheRowDot) {
  const DotKernels& dots = dot_kernels();
  std::cout << "[ path     ] short f16 rows: " << (dots.dot_f16_short_rows ? "several rows at once (AVX-512)"
                                                   : dots.f16_double_tail_below ? "interleaved loop" : "row dots")
            << "\n";
  auto backend = make_cpu_backend(2);
  for (int64_t cols : {1, 7, 8, 9, 16, 31, 33, 63})
    for (int64_t rows : {1, 7, 8, 13, 64}) {
      const auto wf = random_floats(static_cast<size_t>(cols * rows), static_cast<uint32_t>(cols * 100 + rows));
      const auto x = random_floats(static_cast<size_t>(cols), static_cast<uint32_t>(cols + 7));
      std::vector<uint16_t> wh(wf.size());
      for (size_t i = 0; i < wf.size(); i++) wh[i] = fp32_to_fp16(wf[i]);
      std::vector<float> xr(x.size());
      for (size_t i = 0; i < x.size(); i++) xr[i] = fp16_to_fp32(fp32_to_fp16(x[i]));  // as matmul rounds them
      if (dots.dot_f16_short_rows && cols < dots.f16_double_tail_below) {
        std::vector<float> y(static_cast<size_t>(rows));
        dots.dot_f16_short_rows(wh.data(), cols, rows, xr.data(), cols, y.data());
        for (int64_t r = 0; r < rows; r++)
          ASSERT_EQ(y[r], dots.dot_f16_f32(wh.data() + r * cols, xr.data(), cols)) << rows << "x" << cols << " row " << r;
      }
      Weight w{"b", GgmlType::F16, {cols, rows}, wh.data(), wh.size() * 2, nullptr, nullptr};
      w = backend->prepare_weight(w);
      std::vector<float> y(static_cast<size_t>(rows));
      backend->matmul(w, backend->host_view(x.data()), 1, backend->host_view(y.data()));
      for (int64_t r = 0; r < rows; r++)
        ASSERT_EQ(y[r], dots.dot_f16_f32(wh.data() + r * cols, xr.data(), cols)) << rows << "x" << cols << " row " << r;
    }
}

// llama.cpp's GEMM order for batches of plain BF16 matrices on AVX2 (llamafile's tinyBLAS<8, __m256>), as a
// scalar model: per output 8 lanes, lane j += w[k + j] * x[k + j] fused over 8-element steps, then the
// horizontal sum ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)) of its hsum(__m256).
float tinyblas8_bf16(const uint16_t* w, const float* x, int64_t cols) {
  float lane[8] = {};
  for (int64_t k = 0; k < cols; k += 8)
    for (int j = 0; j < 8; j++) lane[j] = std::fma(bf16_to_fp32(w[k + j]), x[k + j], lane[j]);
  float v[4];
  for (int j = 0; j < 4; j++) v[j] = lane[j + 4] + lane[j];
  return (v[0] + v[2]) + (v[1] + v[3]);
}

TEST(GemmFloat, Bf16BatchesInLlamaCppsGemmOrderBitForBit) {
  const FloatTiles* tiles = float_tiles(IsaLevel::Avx2);
  if (!tiles) GTEST_SKIP() << "no AVX2 float tiles on this CPU/build";
  std::cout << "[ path     ] bf16 in llama.cpp's gemm order: " << tiles->isa << "\n";
  ASSERT_EQ(tiles->ggml_width, 8);
  for (int64_t cols : {8, 64, 264})
    for (int64_t rows : {4, 8, 5})
      for (int64_t n : {2, 3, 7}) {
        const auto wf = random_floats(rows * cols, 41), x = random_floats(n * cols, 42);
        std::vector<uint16_t> w(rows * cols);
        for (size_t i = 0; i < w.size(); i++) w[i] = fp32_to_bf16(wf[i]);
        std::vector<float> y(n * rows, -1.0f);
        tiles->gemm(GgmlType::BF16, reinterpret_cast<const uint8_t*>(w.data()), cols * 2, cols, 0, rows, x.data(), n,
                    y.data(), rows, 4);
        for (int64_t r = 0; r < rows; r++)
          for (int64_t t = 0; t < n; t++)
            ASSERT_EQ(y[t * rows + r], tinyblas8_bf16(w.data() + r * cols, x.data() + t * cols, cols))
                << rows << "x" << cols << " n=" << n << " at (" << r << "," << t << ")";
      }
}

TEST(GemmFloat, TilesAgreeWithRowDots) {
  std::vector<const FloatTiles*> levels;  // every level's tiles this CPU runs
  for (IsaLevel isa : {IsaLevel::Avx2, IsaLevel::Avx512})
    if (const FloatTiles* t = float_tiles(isa)) levels.push_back(t);
  if (levels.empty()) GTEST_SKIP() << "no AVX2 on this CPU/build";
  for (const FloatTiles* tiles : levels) expect_float_tiles_agree(*tiles);
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {

TEST(GemmBf16, ConversionRoundsLikeTheScalarReference) {
  const Bf16Tiles* tiles = bf16_tiles();
  if (!tiles) GTEST_SKIP() << "no AVX-512 BF16 on this CPU/build";
  auto x = test::random_floats(101, 21, 3.0f);
  x[5] = 1.00390625f;  // a tie: rounds to even
  x[6] = -0.0f;
  std::vector<uint16_t> got(x.size());
  tiles->convert(x.data(), got.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); i++) EXPECT_EQ(got[i], fp32_to_bf16(x[i])) << i;
}

// llama.cpp's GEMM order for BF16 batches with AVX-512 BF16 (tinyBLAS<32, __m512, __m512bh>), as a scalar
// model: 16 lanes, each vdpbf16ps step adding its lane's odd product, then its even one (Intel's order;
// bf16 products are exact in fp32, each addition rounds), then GCC's _mm512_reduce_add_ps tree (256-bit
// halves, 128-bit halves, lanes {2,3,0,1}, then the last two). Checks the kernel and the instruction's
// semantics at once: the model has no SIMD in it.
float tinyblas32_bf16(const uint16_t* w, const uint16_t* x, int64_t cols) {
  float lane[16] = {};
  for (int64_t k = 0; k < cols; k += 32)
    for (int i = 0; i < 16; i++) {
      for (int e : {1, 0}) {
        volatile float p = bf16_to_fp32(w[k + 2 * i + e]) * bf16_to_fp32(x[k + 2 * i + e]);
        lane[i] = lane[i] + p;
      }
    }
  return gcc_reduce_add16(lane);
}

TEST(GemmBf16, BatchesInLlamaCppsGemmOrderBitForBit) {
  const Bf16Tiles* tiles = bf16_tiles();
  if (!tiles) GTEST_SKIP() << "no AVX-512 BF16 on this CPU/build";
  ASSERT_EQ(tiles->gemm_width, 32);
  for (int64_t cols : {32, 96, 2048})
    for (int64_t rows : {4, 8, 6})
      for (int64_t n : {2, 6, 13}) {
        const auto wf = test::random_floats(rows * cols, 9), xf = test::random_floats(n * cols, 10);
        std::vector<uint16_t> w(rows * cols), x(n * cols);
        for (size_t i = 0; i < w.size(); i++) w[i] = fp32_to_bf16(wf[i]);
        for (size_t i = 0; i < x.size(); i++) x[i] = fp32_to_bf16(xf[i]);
        std::vector<float> y(n * rows, -7.0f);
        tiles->gemm_ggml_order(reinterpret_cast<const uint8_t*>(w.data()), cols * 2, cols, 0, rows, x.data(), n,
                               y.data(), rows, 4);
        for (int64_t t = 0; t < n; t++)
          for (int64_t r = 0; r < rows; r++)
            ASSERT_EQ(y[t * rows + r], tinyblas32_bf16(w.data() + r * cols, x.data() + t * cols, cols))
                << rows << "x" << cols << " n=" << n << " at (" << r << "," << t << ")";
      }
}

TEST(GemmBf16, TilesMatchADoubleDotOnOddShapes) {
  const Bf16Tiles* tiles = bf16_tiles();
  if (!tiles) GTEST_SKIP() << "no AVX-512 BF16 on this CPU/build";
  for (int64_t rows : {1, 5, 8}) {
    for (int64_t cols : {2, 31, 64, 77}) {
      for (int64_t n : {1, 3, 4, 9}) {
        const auto wf = test::random_floats(rows * cols, 7), xf = test::random_floats(n * cols, 8);
        std::vector<uint16_t> w(rows * cols), x(n * cols);
        for (size_t i = 0; i < w.size(); i++) w[i] = fp32_to_bf16(wf[i]);
        for (size_t i = 0; i < x.size(); i++) x[i] = fp32_to_bf16(xf[i]);
        const int64_t ldy = rows + 2;
        std::vector<float> y(n * ldy, -7.0f);
        tiles->gemm(reinterpret_cast<const uint8_t*>(w.data()), cols * 2, cols, 0, rows, x.data(), n, y.data(), ldy, 2);
        for (int64_t t = 0; t < n; t++)
          for (int64_t r = 0; r < ldy; r++) {
            if (r >= rows) {
              EXPECT_EQ(y[t * ldy + r], -7.0f) << "wrote past the rows";
              continue;
            }
            double ref = 0, mag = 0;
            for (int64_t c = 0; c < cols; c++) {
              const double p = double(bf16_to_fp32(w[r * cols + c])) * bf16_to_fp32(x[t * cols + c]);
              ref += p, mag += std::fabs(p);
            }
            EXPECT_NEAR(y[t * ldy + r], ref, 1e-6 * mag + 1e-6) << rows << "x" << cols << " n=" << n;
          }
      }
    }
  }
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {

// AMX is usable only when the CPU has the tiles, the OS saves the tile state (XCR0 bits 17-18) and Linux
// granted the tile data permission; each missing step is named. And this CPU's own answer is consistent
// with its cpuid.
TEST(CpuFeatures, AmxNeedsTheUnitTheOsAndThePermission) {
  CpuFeatures f;
  EXPECT_FALSE(amx_state_from(f, 0).present);
  EXPECT_EQ(amx_state_from(f, 0).detail, "not on this CPU");
  f.amx_tile = f.amx_int8 = true;
  f.xcr0 = 0xe7;  // x87, SSE, AVX, AVX-512: no tile state
  auto s = amx_state_from(f, 0);
  EXPECT_TRUE(s.present);
  EXPECT_FALSE(s.usable);
  EXPECT_NE(s.detail.find("does not enable the tile state"), std::string::npos) << s.detail;
  f.xcr0 |= (1ull << 17) | (1ull << 18);
  s = amx_state_from(f, EPERM);
  EXPECT_FALSE(s.usable);
  EXPECT_NE(s.detail.find("refused the tile data permission"), std::string::npos) << s.detail;
  EXPECT_TRUE(amx_state_from(f, 0).usable);
  const CpuFeatures& here = cpu_features();
  EXPECT_EQ(amx_state().present, here.amx_tile && here.amx_int8);
  if (!amx_state().present) {
    EXPECT_FALSE(amx_state().usable);
  }
  std::cout << "[ cpu      ] amx: " << amx_state().detail << "\n";
}

}  // namespace
}  // namespace kestrel

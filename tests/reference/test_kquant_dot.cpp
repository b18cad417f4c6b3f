// k-quant and FP8 row dots: the scalar integer formulas equal the float dot
// of the dequantized row with the dequantized Q8_K activations (the blocks
// checked against llama.cpp's elsewhere), on our blocks and on llama.cpp's
// own (the reference model's tensors); every SIMD table this CPU runs equals
// the scalar one.
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>

#include "hw/cpu_features.h"
#include "kernels/kquant_dot.h"
#include "gguf/gguf.h"
#include "test_support.h"

namespace kestrel {
namespace {

std::vector<const KQuantDots*> tables() {
  std::vector<const KQuantDots*> t{&scalar_kquant_dots()};
  const auto& f = cpu_features();
  if (f.avx2 && f.fma && f.f16c)
    if (const KQuantDots* k = avx2_kquant_dots()) t.push_back(k);
  if (f.avx512vnni && f.avx512vl)
    if (const KQuantDots* k = avx512vnni_kquant_dots()) t.push_back(k);
  return t;
}

float call(const KQuantDots& k, GgmlType type, const void* w, const BlockQ8_K* xq, const float* x, int64_t n) {
  switch (type) {
    case GgmlType::Q4_K:
      return k.q4_K(static_cast<const BlockQ4_K*>(w), xq, n);
    case GgmlType::Q5_K:
      return k.q5_K(static_cast<const BlockQ5_K*>(w), xq, n);
    case GgmlType::Q6_K:
      return k.q6_K(static_cast<const BlockQ6_K*>(w), xq, n);
    default:
      return k.fp8(static_cast<const BlockFp8*>(w), x, n);
  }
}

void check_rows(GgmlType type, const uint8_t* rows, int64_t n_rows, int64_t cols) {
  const auto x = test::random_floats(static_cast<size_t>(cols), 77);
  std::vector<BlockQ8_K> xq(static_cast<size_t>(cols / kQK_K));
  quantize_row_q8_K(x.data(), xq.data(), cols);
  std::vector<float> xd(static_cast<size_t>(cols)), wd(static_cast<size_t>(cols));
  for (int64_t b = 0; b < cols / kQK_K; b++)
    for (int j = 0; j < kQK_K; j++) xd[b * kQK_K + j] = xq[b].d * xq[b].qs[j];
  const bool fp8 = type == GgmlType::KESTREL_FP8_E4M3;
  const size_t rb = row_bytes(type, cols);
  for (int64_t r = 0; r < n_rows; r++) {
    const uint8_t* w = rows + r * rb;
    dequantize_row(type, w, wd.data(), cols);
    double want = 0, scale = 0;
    for (int64_t c = 0; c < cols; c++)
      want += static_cast<double>(wd[c]) * (fp8 ? x[c] : xd[c]), scale += std::fabs(wd[c] * x[c]);
    const float ref = call(scalar_kquant_dots(), type, w, xq.data(), x.data(), cols);
    ASSERT_NEAR(ref, want, 1e-5 * scale + 1e-6) << type_name(type) << " row " << r;
    for (const KQuantDots* k : tables())
      ASSERT_NEAR(call(*k, type, w, xq.data(), x.data(), cols), ref, 1e-5 * scale + 1e-6)
          << type_name(type) << " " << k->isa << " row " << r;
  }
}

// The many-token forms (prefill) equal single dots, on every table.
TEST(KQuantDot, ManyTokenFormsEqualSingleDots) {
  const int64_t cols = 768;
  const auto w = test::random_floats(static_cast<size_t>(cols), 31);
  std::vector<std::vector<BlockQ8_K>> xq(16, std::vector<BlockQ8_K>(static_cast<size_t>(cols / kQK_K)));
  const BlockQ8_K* xs[16];
  for (int t = 0; t < 16; t++) {
    const auto x = test::random_floats(static_cast<size_t>(cols), 40 + t);
    quantize_row_q8_K(x.data(), xq[t].data(), cols);
    xs[t] = xq[t].data();
  }
  for (const GgmlType type : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    std::vector<uint8_t> q(row_bytes(type, cols));
    quantize_row(type, w.data(), q.data(), cols);
    for (const KQuantDots* k : tables()) {
      ASSERT_GE(k->tokens, 1);
      ASSERT_LE(k->tokens, 16);
      float many[16];
      if (type == GgmlType::Q4_K) k->q4_K_xt(reinterpret_cast<const BlockQ4_K*>(q.data()), xs, cols, many);
      if (type == GgmlType::Q5_K) k->q5_K_xt(reinterpret_cast<const BlockQ5_K*>(q.data()), xs, cols, many);
      if (type == GgmlType::Q6_K) k->q6_K_xt(reinterpret_cast<const BlockQ6_K*>(q.data()), xs, cols, many);
      for (int t = 0; t < k->tokens; t++)
        EXPECT_EQ(many[t], call(*k, type, q.data(), xs[t], nullptr, cols)) << type_name(type) << " " << k->isa;
    }
  }
}

TEST(KQuantDot, Q8KActivationsReproduceTheirInput) {
  const auto x = test::random_floats(512, 5);
  std::vector<BlockQ8_K> q(2);
  quantize_row_q8_K(x.data(), q.data(), 512);
  for (int b = 0; b < 2; b++) {
    int bsum0 = 0;
    for (int j = 0; j < 16; j++) bsum0 += q[b].qs[j];
    EXPECT_EQ(q[b].bsums[0], bsum0);
    for (int j = 0; j < 256; j++) ASSERT_NEAR(q[b].d * q[b].qs[j], x[b * 256 + j], std::fabs(q[b].d) * 0.5001f);
  }
}

TEST(KQuantDot, OurBlocksEveryTableAgreesWithTheFloatDot) {
  const int64_t rows = 6, cols = 1024;
  const auto w = test::random_floats(static_cast<size_t>(rows * cols), 8);
  for (const GgmlType type : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::KESTREL_FP8_E4M3}) {
    std::vector<uint8_t> q(row_bytes(type, cols) * rows);
    for (int64_t r = 0; r < rows; r++)
      quantize_row(type, w.data() + r * cols, q.data() + r * row_bytes(type, cols), cols);
    check_rows(type, q.data(), rows, cols);
  }
  EXPECT_GE(tables().size(), 1u);
}

TEST(KQuantDot, LlamaCppsBlocksEveryTableAgreesWithTheFloatDot) {
  for (const char* name : {"q4_k", "q5_k", "q6_k"}) {
    const GgufFile f = GgufFile::open(test::shared(std::string("reference/llama.cpp/llama-q.") + name + ".gguf"));
    const GgufTensorInfo* t = f.find_tensor("blk.0.ffn_down.weight");
    ASSERT_NE(t, nullptr);
    check_rows(t->type, t->data, std::min<int64_t>(32, t->n_elements() / t->ne[0]), t->ne[0]);
  }
}

// tables() holds every SIMD table this CPU can run; one it cannot run is
// reported as skipped, with the reason, instead of passing unseen.
TEST(KQuantDot, Avx2TableIsTestedWhereTheCpuRunsIt) {
  const auto& f = cpu_features();
  if (!(f.avx2 && f.fma && f.f16c)) GTEST_SKIP() << "no AVX2/FMA/F16C on this CPU: the AVX2 k-quant dots are untested here";
  ASSERT_NE(avx2_kquant_dots(), nullptr) << "built without the AVX2 kernels";
  const auto t = tables();
  EXPECT_NE(std::find(t.begin(), t.end(), avx2_kquant_dots()), t.end());
}

TEST(KQuantDot, Avx512VnniTableIsTestedWhereTheCpuRunsIt) {
  const auto& f = cpu_features();
  if (!(f.avx512vnni && f.avx512vl))
    GTEST_SKIP() << "no AVX-512 VNNI on this CPU: the AVX-512 VNNI k-quant dots are untested here";
  ASSERT_NE(avx512vnni_kquant_dots(), nullptr) << "built without the AVX-512 VNNI kernels";
  const auto t = tables();
  EXPECT_NE(std::find(t.begin(), t.end(), avx512vnni_kquant_dots()), t.end());
}

}  // namespace
}  // namespace kestrel

// The qdot.h row dots (Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, IQ4_NL, IQ4_XS, MXFP4):
// - the scalar integer formulas equal the float dot of the dequantized
//   weights with the dequantized activations, on blocks of random bytes
//   (every bit pattern of the layout, not only what our quantizer writes)
//   and on llama.cpp's own blocks (the compat reference's files);
// - every SIMD table this CPU runs equals the scalar one, for one token and
//   for the many-token prefill kernel, on odd row lengths;
// - Matmul gives each token the same result whatever the batch.
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <cstring>
#include <random>

#include "formats/fp16.h"
#include "formats/kquant_formats.h"
#include "formats/q4q5_formats.h"
#include "hw/cpu_features.h"
#include "kernels/kquant_dot.h"
#include "kernels/matmul.h"
#include "kernels/qdot.h"
#include "gguf/gguf.h"
#include "test_support.h"

namespace kestrel {
namespace {

// Random block bytes with every scale field set to a small finite value, so
// that the dot is finite and every level bit pattern occurs.
std::vector<uint8_t> random_rows(GgmlType type, int64_t rows, int64_t cols, uint32_t seed) {
  const size_t rb = row_bytes(type, cols);
  std::vector<uint8_t> bytes(rb * static_cast<size_t>(rows));
  std::mt19937 rng(seed);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  const size_t bs = traits(type).type_size;
  for (size_t off = 0; off < bytes.size(); off += bs) {
    uint8_t* blk = bytes.data() + off;
    auto put = [&](size_t at, float v) {
      const uint16_t h = fp32_to_fp16(v);
      std::memcpy(blk + at, &h, 2);
    };
    switch (type) {
      case GgmlType::Q4_1: case GgmlType::Q5_1: put(0, scale(rng)); put(2, scale(rng)); break;
      case GgmlType::Q5_0: case GgmlType::IQ4_NL: case GgmlType::IQ4_XS: put(0, scale(rng)); break;
      case GgmlType::Q2_K: put(80, std::fabs(scale(rng))); put(82, std::fabs(scale(rng))); break;
      case GgmlType::Q3_K: put(108, scale(rng)); break;
      case GgmlType::MXFP4: blk[0] = static_cast<uint8_t>(118 + rng() % 8); break;
      default: break;
    }
  }
  return bytes;
}

struct Acts {
  ActFormat format;
  std::vector<uint8_t> bytes;   // the quantized activations
  std::vector<float> widened;   // the values they stand for
};

Acts quantized_acts(ActFormat f, const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  Acts a{f, std::vector<uint8_t>(activation_row_bytes(f, n)), std::vector<float>(x.size())};
  quantize_activations(f, x.data(), a.bytes.data(), n);
  for (int64_t i = 0; i < n; i++) {
    if (f == ActFormat::Q8_0) {
      const auto* b = reinterpret_cast<const BlockQ8_0*>(a.bytes.data()) + i / 32;
      a.widened[i] = fp16_to_fp32(b->d) * b->qs[i % 32];
    } else if (f == ActFormat::Q8_1) {
      const auto* b = reinterpret_cast<const BlockQ8_1*>(a.bytes.data()) + i / 32;
      a.widened[i] = fp16_to_fp32(b->d) * b->qs[i % 32];
    } else {
      const auto* b = reinterpret_cast<const BlockQ8_K*>(a.bytes.data()) + i / kQK_K;
      a.widened[i] = b->d * b->qs[i % kQK_K];
    }
  }
  return a;
}

// Q8_1's stored sum is d * sum(q) rounded to fp16: the minimum term uses it, not the exact sum.
double q8_1_sum_error(const Acts& a, const std::vector<float>& w_min_per_block) {
  double e = 0;
  const auto* b = reinterpret_cast<const BlockQ8_1*>(a.bytes.data());
  for (size_t i = 0; i < w_min_per_block.size(); i++) {
    double exact = 0;
    for (int j = 0; j < 32; j++) exact += fp16_to_fp32(b[i].d) * b[i].qs[j];
    e += std::fabs(w_min_per_block[i] * (fp16_to_fp32(b[i].s) - exact));
  }
  return e;
}

void check_rows(GgmlType type, const uint8_t* rows, int64_t n_rows, int64_t cols, const char* what) {
  const QTypeDots* ref = scalar_qdots().find(type);
  ASSERT_NE(ref, nullptr) << type_name(type);
  const auto x = test::random_floats(static_cast<size_t>(cols), 77);
  const ActFormat format = activation_format(type);
  const Acts a = quantized_acts(format, x);
  const void* xs1[1] = {a.bytes.data()};
  std::vector<float> wd(static_cast<size_t>(cols));
  const size_t rb = row_bytes(type, cols);
  for (int64_t r = 0; r < n_rows; r++) {
    const uint8_t* w = rows + r * rb;
    dequantize_row(type, w, wd.data(), cols);
    double want = 0, scale = 0;
    for (int64_t c = 0; c < cols; c++) want += double(wd[c]) * a.widened[c], scale += std::fabs(wd[c] * a.widened[c]);
    double tol = 1e-5 * scale + 1e-6;
    if (format == ActFormat::Q8_1) {
      std::vector<float> mins(static_cast<size_t>(cols / 32));
      for (size_t i = 0; i < mins.size(); i++) {
        uint16_t m;
        std::memcpy(&m, w + i * traits(type).type_size + 2, 2);
        mins[i] = fp16_to_fp32(m);
      }
      tol += q8_1_sum_error(a, mins);
    }
    float got;
    ref->one(w, xs1, cols, &got);
    ASSERT_NEAR(got, want, tol) << type_name(type) << " " << what << " row " << r;
    for (const QDotTable* t : test::simd_qdot_tables()) {
      const QTypeDots* d = t->find(type);
      ASSERT_NE(d, nullptr) << type_name(type) << " " << t->isa;
      float simd;
      d->one(w, xs1, cols, &simd);
      ASSERT_NEAR(simd, got, 1e-5 * scale + 1e-6) << type_name(type) << " " << t->isa << " " << what << " row " << r;
      // Many tokens: the same row against `tokens` copies gives the one-token result in every slot.
      std::vector<const void*> xs(static_cast<size_t>(t->tokens), a.bytes.data());
      std::vector<float> out(static_cast<size_t>(t->tokens));
      d->many(w, xs.data(), cols, out.data());
      for (float o : out) ASSERT_EQ(o, simd) << type_name(type) << " " << t->isa << " many-token kernel";
    }
  }
}

const GgmlType kTypes[] = {GgmlType::Q4_1, GgmlType::Q5_0,  GgmlType::Q5_1,   GgmlType::IQ4_NL,
                           GgmlType::MXFP4, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::IQ4_XS};

TEST(QDot, EveryTableCoversEveryType) {
  for (GgmlType t : kTypes) {
    EXPECT_NE(scalar_qdots().find(t), nullptr) << type_name(t);
    EXPECT_NE(qdots().find(t), nullptr) << type_name(t);
    EXPECT_TRUE(traits(t).computable) << type_name(t);
  }
  if (cpu_features().avx2) {
    EXPECT_FALSE(test::simd_qdot_tables().empty());
  }
}

TEST(QDot, RandomBlocksOddLengths) {
  for (GgmlType t : kTypes) {
    const int64_t bs = traits(t).block_size;
    for (int64_t blocks : {1, 3, 7, 9}) {
      const int64_t cols = bs * blocks;
      const auto rows = random_rows(t, 5, cols, static_cast<uint32_t>(blocks * 31 + static_cast<int>(t)));
      check_rows(t, rows.data(), 5, cols, "random");
    }
  }
}

TEST(QDot, OurQuantizerRoundTrips) {
  // What we write decodes close to the input: a wrong packing would not.
  const double bound[] = {0.12, 0.06, 0.06, 0.12, 0.25, 0.45, 0.25, 0.12};
  int k = 0;
  for (GgmlType t : kTypes) {
    const int64_t cols = 512;
    const auto x = test::random_floats(static_cast<size_t>(cols) * 4, 5);
    std::vector<uint8_t> q(row_bytes(t, cols) * 4);
    std::vector<float> back(x.size());
    for (int r = 0; r < 4; r++) {
      quantize_row(t, x.data() + r * cols, q.data() + r * row_bytes(t, cols), cols);
      dequantize_row(t, q.data() + r * row_bytes(t, cols), back.data() + r * cols, cols);
    }
    double err = 0, ref = 0;
    for (size_t i = 0; i < x.size(); i++) err += (back[i] - x[i]) * (back[i] - x[i]), ref += x[i] * x[i];
    EXPECT_LT(std::sqrt(err / ref), bound[k++]) << type_name(t);
    check_rows(t, q.data(), 4, cols, "ours");
  }
}

TEST(QDot, LlamaCppBlocks) {
  // Every tensor of these types in the compat set's files, as llama-quantize wrote it.
  int checked = 0;
  for (const char* name : {"llama32.Q4_1", "llama32.Q5_0", "llama32.Q5_1", "llama32.Q2_K", "llama32.Q3_K_M",
                           "llama32.IQ4_NL", "llama32.IQ4_XS", "qwen25.IQ4_NL"}) {
    const GgufFile f = GgufFile::open(test::shared(std::string("reference/compat/models/") + name + ".gguf"));
    for (const auto& ti : f.tensors()) {
      if (!scalar_qdots().find(ti.type) || ti.ne.size() != 2) continue;
      check_rows(ti.type, ti.data, std::min<int64_t>(ti.ne[1], 8), ti.ne[0], name);
      checked++;
    }
  }
  EXPECT_GT(checked, 40);
}

TEST(QDot, MatmulBatchInvariant) {
  ThreadPool pool(2);
  Matmul mm;
  for (GgmlType t : kTypes) {
    const int64_t cols = traits(t).block_size == 256 ? 512 : 96, rows = 37;
    const auto wf = test::random_floats(static_cast<size_t>(rows * cols), 9);
    std::vector<uint8_t> wq(row_bytes(t, cols) * rows);
    for (int64_t r = 0; r < rows; r++) quantize_row(t, wf.data() + r * cols, wq.data() + r * row_bytes(t, cols), cols);
    const Weight w{"w", t, {cols, rows}, wq.data(), wq.size(), nullptr};
    const int64_t n = 11;  // not a multiple of the kernels' token count
    const auto x = test::random_floats(static_cast<size_t>(n * cols), 10);
    std::vector<float> batch(static_cast<size_t>(n * rows)), one(static_cast<size_t>(rows));
    mm.run(pool, w, x.data(), n, batch.data());
    for (int64_t tk = 0; tk < n; tk++) {
      mm.run(pool, w, x.data() + tk * cols, 1, one.data());
      for (int64_t r = 0; r < rows; r++) ASSERT_EQ(batch[tk * rows + r], one[r]) << type_name(t) << " token " << tk;
    }
    // And the result is the dot with the dequantized weights (to the activations' 8-bit rounding).
    std::vector<float> wd(static_cast<size_t>(cols));
    dequantize_row(t, wq.data(), wd.data(), cols);
    double want = 0, scale = 0;
    for (int64_t c = 0; c < cols; c++) want += double(wd[c]) * x[c], scale += std::fabs(wd[c] * x[c]);
    EXPECT_NEAR(batch[0], want, 0.02 * scale) << type_name(t);
  }
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {

#ifdef KESTREL_HAVE_AVX2_KERNELS
TEST(QDot, Q8KQuantizerSimdEqualsScalar) {
  const auto& f = cpu_features();
  if (!f.avx2) GTEST_SKIP() << "no AVX2 on this CPU";
  for (uint32_t seed = 0; seed < 20; seed++) {
    auto x = test::random_floats(1024, seed, seed % 2 ? 1.0f : 1e-3f);
    if (seed == 3) x[5] = -9.0f, x[17] = 9.0f;  // ties of magnitude: the first one's sign decides
    if (seed == 4) std::fill(x.begin(), x.begin() + 256, 0.0f);  // an all-zero block
    if (seed == 5) for (size_t i = 0; i < x.size(); i++) x[i] = (static_cast<float>(i % 7) - 3) * 0.5f;  // exact halves
    if (seed == 6) x[300] = 127.5f / 127.0f * 4.0f, x[301] = -4.0f;  // a product that rounds at a half
    std::vector<BlockQ8_K> a(4), b(4), c(4);
    quantize_row_q8_K_scalar(x.data(), a.data(), 1024);
    quantize_row_q8_K_avx2(x.data(), c.data(), 1024);
    ASSERT_EQ(std::memcmp(a.data(), c.data(), sizeof(BlockQ8_K) * 4), 0) << "avx2, seed " << seed;
    if (!f.avx512bw) continue;
    quantize_row_q8_K_avx512(x.data(), b.data(), 1024);
    ASSERT_EQ(std::memcmp(a.data(), b.data(), sizeof(BlockQ8_K) * 4), 0) << "avx512, seed " << seed;
  }
}
#endif

// The loops above test every SIMD table this CPU can run; one it cannot run
// is reported as skipped, with the reason, instead of passing unseen.
TEST(QDot, Avx2TableIsTestedWhereTheCpuRunsIt) {
  const auto& f = cpu_features();
  if (!(f.avx2 && f.fma && f.f16c)) GTEST_SKIP() << "no AVX2/FMA/F16C on this CPU: the AVX2 row dots are untested here";
  ASSERT_NE(avx2_qdots(), nullptr) << "built without the AVX2 kernels";
  const auto tables = test::simd_qdot_tables();
  EXPECT_NE(std::find(tables.begin(), tables.end(), avx2_qdots()), tables.end());
}

TEST(QDot, Avx512VnniTableIsTestedWhereTheCpuRunsIt) {
  const auto& f = cpu_features();
  if (!(f.avx512vnni && f.avx512vl))
    GTEST_SKIP() << "no AVX-512 VNNI on this CPU: the AVX-512 VNNI row dots are untested here";
  ASSERT_NE(avx512vnni_qdots(), nullptr) << "built without the AVX-512 VNNI kernels";
  const auto tables = test::simd_qdot_tables();
  EXPECT_NE(std::find(tables.begin(), tables.end(), avx512vnni_qdots()), tables.end());
}

}  // namespace
}  // namespace kestrel

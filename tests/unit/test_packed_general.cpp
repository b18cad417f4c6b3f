// The general repacked form (packed_q8.h, K8/K8Z) of Q5_K and Q6_K: each block's levels, scales and offsets decode to exactly what the
// format's own dequantizer gives (itself checked against llama.cpp's files);
// the VNNI kernel equals the scalar reference bit for bit; both equal a
// double dot of the dequantized weights and activations; and Matmul's
// batches on packed weights agree with the file layout's row dots (which
// round activations the same way: equal to float rounding).
#include <gtest/gtest.h>

#include <cmath>

#include "core/block_formats.h"
#include "kernels/dot.h"
#include "kernels/matmul.h"
#include "kernels/packed_q8.h"
#include "test_support.h"

namespace kestrel {
namespace {

const GgmlType kTypes[] = {GgmlType::Q5_K, GgmlType::Q6_K};

test::QuantMatrix matrix(GgmlType type, int64_t rows, int64_t cols, uint32_t seed) {
  return test::quantized_matrix(type, rows, cols, seed);
}

TEST(PackedGeneral, BlocksDecodeAsTheFormat) {
  // Q2_K's, Q3_K's and Q4_K's compact packing takes its levels from unpack_block32 too.
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q2_K, GgmlType::Q3_K}) {
    const int64_t cols = 512;
    const auto m = matrix(t, 3, cols, 1);
    std::vector<float> want(cols);
    for (int64_t r = 0; r < 3; r++) {
      dequantize_row(t, m.w.row(r), want.data(), cols);
      for (int64_t b = 0; b < cols / 32; b++) {
        uint8_t L[32];
        float s[2], o[2];
        unpack_block32(t, m.w.row(r), b, L, s, o);
        for (int e = 0; e < 32; e++)
          ASSERT_NEAR(s[e / 16] * L[e] + o[e / 16], want[b * 32 + e], 1e-6f * (1 + std::fabs(want[b * 32 + e])))
              << type_name(t) << " row " << r << " element " << b * 32 + e;
      }
    }
  }
}

TEST(PackedGeneral, KernelEqualsReferenceAndTheDequantizedDot) {
  for (GgmlType t : kTypes)
    for (int64_t rows : {1, 17, 40}) {
      const int64_t cols = 256, nb = cols / 32;
      const auto m = matrix(t, rows, cols, 2);
      const auto p = pack_weight(m.w);
      EXPECT_TRUE(p->is_k());
      for (int64_t n : {2, 5, 8, 13}) {
        const auto f = test::random_floats(n * cols, 3);
        std::vector<BlockQ8_0> q(n * nb);
        for (int64_t i = 0; i < n; i++) quantize_row_q8_0_ref(f.data() + i * cols, q.data() + i * nb, cols, Rounding::HalfToEven);
        std::vector<uint8_t> packed(packed_activation_bytes(n, nb), 0xAB);
        pack_activations(p->kind, q.data(), n, nb, 0, (n + 7) / 8, packed.data());
        const PackedActivations a{packed.data(), n, nb};
        std::vector<float> ref(n * rows), got(n * rows, -1), wd(cols), xd(cols);
        packed_gemm_reference(*p, 0, p->n_groups, a, ref.data(), rows);
        for (int64_t r = 0; r < rows; r++) {
          dequantize_row(t, m.w.row(r), wd.data(), cols);
          for (int64_t i = 0; i < n; i++) {
            dequantize_row(GgmlType::Q8_0, q.data() + i * nb, xd.data(), cols);
            double want = 0, scale = 0;
            for (int64_t c = 0; c < cols; c++) want += double(wd[c]) * xd[c], scale += std::fabs(wd[c] * xd[c]);
            ASSERT_NEAR(ref[i * rows + r], want, 1e-5 * scale + 1e-6) << type_name(t) << " row " << r << " token " << i;
          }
        }
        if (!packed_gemm_available()) continue;
        packed_gemm_vnni(*p, 0, p->n_groups, a, got.data(), rows, 8);
        for (size_t i = 0; i < ref.size(); i++) ASSERT_EQ(got[i], ref[i]) << type_name(t) << " n " << n << " at " << i;
      }
    }
}

TEST(PackedGeneral, MatmulBatchesOnPackedWeightsMatchTheFileLayout) {
  const int64_t rows = 50, cols = 512;
  ThreadPool pool(2);
  Matmul mm(dot_kernels());
  for (GgmlType t : kTypes) {
    const auto m = matrix(t, rows, cols, 4);
    Weight pw = m.w;
    pw.packed = pack_weight(m.w, &pool);
    for (int64_t n : {1, 9}) {
      const auto x = test::random_floats(n * cols, 5);
      std::vector<float> plain(n * rows), packed(n * rows);
      mm.run(pool, m.w, x.data(), n, plain.data());
      mm.run(pool, pw, x.data(), n, packed.data());
      double err = 0, norm = 0;
      for (int64_t i = 0; i < n * rows; i++) {
        if (n == 1) {
          ASSERT_EQ(packed[i], plain[i]) << type_name(t) << ": one token reads the file layout";
        }
        err += (packed[i] - plain[i]) * (packed[i] - plain[i]), norm += plain[i] * plain[i];
      }
      // The same activation rounding as the file layout (Q8_K per 256): only the summation order differs.
      EXPECT_LT(std::sqrt(err / norm), 1e-5) << type_name(t) << " n " << n;
    }
  }
}

}  // namespace
}  // namespace kestrel

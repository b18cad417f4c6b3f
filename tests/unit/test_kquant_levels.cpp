// unpack_block32 (packed_q8.h), where the packer takes the k-quants' levels
// from: each 32-element block's levels, scales and offsets decode to exactly
// what the format's own dequantizer gives (itself checked against
// llama.cpp's files).
#include <gtest/gtest.h>

#include <cmath>

#include "formats/block_formats.h"
#include "kernels/packed_q8.h"
#include "test_support.h"

namespace kestrel {
namespace {

TEST(KquantLevels, BlocksDecodeAsTheFormat) {
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q2_K, GgmlType::Q3_K}) {
    const int64_t cols = 512;
    const auto m = test::quantized_matrix(t, 3, cols, 1);
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

}  // namespace
}  // namespace kestrel

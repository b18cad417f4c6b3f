// FP8 E4M3 ("fn": bias 7, no infinities, max 448) and Kestrel's FP8 weight
// blocks. The code points are checked against values from the OCP FP8
// specification, rounding against a brute-force nearest search over all 254
// finite codes.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "formats/block_formats.h"
#include "formats/fp16.h"
#include "formats/fp8.h"

namespace kestrel {
namespace {

TEST(Fp8, CodePointsFromTheSpecification) {
  EXPECT_EQ(e4m3_to_fp32(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_fp32(0x7E), 448.0f);     // largest finite
  EXPECT_EQ(e4m3_to_fp32(0x08), 0x1.0p-6f);  // smallest normal
  EXPECT_EQ(e4m3_to_fp32(0x01), 0x1.0p-9f);  // smallest subnormal
  EXPECT_EQ(e4m3_to_fp32(0xC0), -2.0f);
  EXPECT_TRUE(std::isnan(e4m3_to_fp32(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3_to_fp32(0xFF)));
  EXPECT_EQ(fp32_to_e4m3(1.0f), 0x38);
  EXPECT_EQ(fp32_to_e4m3(-448.0f), 0xFE);
  EXPECT_EQ(fp32_to_e4m3(1e9f), 0x7E);     // saturates, never NaN
  EXPECT_EQ(fp32_to_e4m3(1.0625f), 0x38);  // half-way between 1 and 1.125: even mantissa
  EXPECT_EQ(fp32_to_e4m3(1.1875f), 0x3A);  // half-way between 1.125 and 1.25: even mantissa
}

TEST(Fp8, EveryCodeRoundTripsAndEncodingIsNearest) {
  for (int c = 0; c < 256; c++) {
    if ((c & 0x7F) == 0x7F) continue;
    const float v = e4m3_to_fp32(static_cast<uint8_t>(c));
    if (c == 0x80) continue;  // -0 encodes as itself but compares equal to 0
    EXPECT_EQ(fp32_to_e4m3(v), c) << c;
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mag(-12.0f, 9.0f);
  for (int i = 0; i < 20000; i++) {
    const float x = std::exp2(mag(rng)) * (i % 2 ? -1.0f : 1.0f);
    const float got = e4m3_to_fp32(fp32_to_e4m3(x));
    float best = INFINITY;
    for (int c = 0; c < 256; c++)
      if ((c & 0x7F) != 0x7F) best = std::min(best, std::fabs(e4m3_to_fp32(static_cast<uint8_t>(c)) - x));
    ASSERT_EQ(std::fabs(got - x), best) << x;
  }
}

TEST(Fp8, BlocksKeepThreeMantissaBitsOfPrecision) {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  std::vector<float> x(4096), y(4096);
  for (auto& v : x) v = dist(rng);
  x[5] = 0.5f;  // an outlier sets its block's scale; the rest of the block keeps relative precision
  std::vector<BlockFp8> q(4096 / kQKFp8);
  quantize_row_fp8(x.data(), q.data(), 4096);
  dequantize_row_fp8(q.data(), y.data(), 4096);
  double err = 0, norm = 0;
  int normal_checked = 0;
  for (int i = 0; i < 4096; i++) {
    // In the normal range a value is off by at most half an ulp of 3 mantissa bits (2^-4 relative), plus the
    // fp16 rounding of the block scale.
    const float d = fp16_to_fp32(q[i / kQKFp8].d);
    if (std::fabs(x[i]) >= d * 0x1.0p-6f) {
      ASSERT_LE(std::fabs(y[i] - x[i]), std::fabs(x[i]) * (0x1.0p-4f + 0x1.0p-10f)) << i;
      normal_checked++;
    }
    err += (x[i] - y[i]) * (x[i] - y[i]);
    norm += x[i] * x[i];
  }
  EXPECT_GT(normal_checked, 4000);
  EXPECT_LT(std::sqrt(err / norm), 0.04);
  EXPECT_NEAR(y[5], 0.5f, 0.5f / 1024);
}

}  // namespace
}  // namespace kestrel

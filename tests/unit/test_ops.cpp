// RoPE layouts and scaling, RMSNorm and SiLU against direct formulas.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/ops.h"

namespace kestrel {
namespace {

TEST(Rope, AdjacentPairsRotateByPositionTimesFrequency) {
  // One head of 4: pairs (0,1) at frequency 1, (2,3) at 10000^(-2/4) = 0.01.
  float x[4] = {1, 0, 1, 0};
  const int32_t pos = 3;
  RopeParams p{RopeStyle::Adjacent, 4, 10000.0f, 1.0f};
  rope_rows(x, &pos, 1, 1, 4, p);
  EXPECT_NEAR(x[0], std::cos(3.0f), 1e-6);
  EXPECT_NEAR(x[1], std::sin(3.0f), 1e-6);
  EXPECT_NEAR(x[2], std::cos(0.03f), 1e-6);
  EXPECT_NEAR(x[3], std::sin(0.03f), 1e-6);
}

TEST(Rope, NeoxRotatesHalvesAndEqualsAdjacentOnPermutedDims) {
  float a[8], n[8];
  for (int i = 0; i < 8; i++) a[i] = static_cast<float>(i + 1) * 0.3f;
  // NeoX pairs (i, i+4) are adjacent pairs (2i, 2i+1) after interleaving the halves.
  for (int i = 0; i < 4; i++) {
    n[i] = a[2 * i];
    n[i + 4] = a[2 * i + 1];
  }
  const int32_t pos = 7;
  rope_rows(a, &pos, 1, 1, 8, {RopeStyle::Adjacent, 8, 500.0f, 1.0f});
  rope_rows(n, &pos, 1, 1, 8, {RopeStyle::NeoX, 8, 500.0f, 1.0f});
  for (int i = 0; i < 4; i++) {
    EXPECT_NEAR(n[i], a[2 * i], 1e-6);
    EXPECT_NEAR(n[i + 4], a[2 * i + 1], 1e-6);
  }
}

TEST(Rope, LinearScalingDividesThePosition) {
  float a[8], b[8];
  for (int i = 0; i < 8; i++) a[i] = b[i] = std::sin(static_cast<float>(i));
  const int32_t p8 = 8, p2 = 2;
  rope_rows(a, &p8, 1, 2, 4, {RopeStyle::Adjacent, 4, 10000.0f, 0.25f});  // 2 heads
  rope_rows(b, &p2, 1, 2, 4, {RopeStyle::Adjacent, 4, 10000.0f, 1.0f});
  for (int i = 0; i < 8; i++) EXPECT_NEAR(a[i], b[i], 1e-6);
}

TEST(Rope, PartialRotationLeavesTheRestAlone) {
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  const int32_t pos = 5;
  rope_rows(x, &pos, 1, 1, 8, {RopeStyle::NeoX, 4, 10000.0f, 1.0f});
  EXPECT_FLOAT_EQ(x[4], 5);
  EXPECT_FLOAT_EQ(x[7], 8);
  EXPECT_NE(x[0], 1);
}

TEST(Ops, RmsNormAndSiluMul) {
  const float x[4] = {1, -2, 3, -4}, w[4] = {1, 1, 2, 0.5f};
  float y[4];
  rmsnorm_rows(x, w, y, 1, 4, 0.0f);
  const float rms = std::sqrt((1 + 4 + 9 + 16) / 4.0f);
  for (int i = 0; i < 4; i++) EXPECT_NEAR(y[i], x[i] / rms * w[i], 1e-6);
  float g[2] = {0.0f, 2.0f};
  const float u[2] = {5.0f, 3.0f};
  silu_mul(g, u, 2);
  EXPECT_FLOAT_EQ(g[0], 0.0f);
  EXPECT_NEAR(g[1], 2.0f / (1.0f + std::exp(-2.0f)) * 3.0f, 1e-6);
}

}  // namespace
}  // namespace kestrel

// KV-cache row formats: what is written reads back within each type's
// rounding, and attention over a quantized cache equals attention over a
// float32 cache holding the same dequantized rows (both kernels) — the
// kernels dequantize exactly what the format stores, nothing else.
#include <gtest/gtest.h>

#include <cmath>

#include "hw/cpu_features.h"
#include "kernels/attention.h"
#include "kernels/kv_format.h"
#include "kv/kv_cache.h"
#include "test_support.h"

namespace kestrel {
namespace {

constexpr KvType kQuantized[] = {KvType::F16, KvType::BF16, KvType::Q8_0, KvType::FP8, KvType::Q4};

double relative_rms(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0, n = 0;
  for (size_t i = 0; i < a.size(); i++) e += (a[i] - b[i]) * (a[i] - b[i]), n += a[i] * a[i];
  return std::sqrt(e / n);
}

TEST(KvFormat, RowsReadBackWithinTheirTypesRounding) {
  // Keys-like data: every 16th channel an outlier with an offset.
  std::vector<float> x = test::random_floats(64 * 128, 5);
  for (size_t i = 0; i < x.size(); i += 16) x[i] = 8.0f + x[i];
  const std::pair<KvType, std::pair<double, double>> bounds[] = {{KvType::F16, {0, 1e-3}},
                                                                 {KvType::BF16, {1e-4, 8e-3}},
                                                                 {KvType::Q8_0, {1e-4, 0.01}},
                                                                 {KvType::FP8, {0.005, 0.06}},
                                                                 {KvType::Q4, {0.02, 0.2}}};
  for (const auto& [type, range] : bounds) {
    const KvRowFormat f(type, 64);
    std::vector<uint8_t> bytes(f.bytes(static_cast<int64_t>(x.size())));
    f.quantize(x.data(), bytes.data(), static_cast<int64_t>(x.size()));
    std::vector<float> y(x.size());
    f.dequantize(bytes.data(), 0, y.data(), static_cast<int64_t>(x.size()));
    const double err = relative_rms(x, y);
    EXPECT_GE(err, range.first) << kv_type_name(type);
    EXPECT_LT(err, range.second) << kv_type_name(type);
    // A piece read from the middle equals the same piece of the whole row.
    std::vector<float> piece(64);
    f.dequantize(bytes.data(), 128, piece.data(), 64);
    for (int i = 0; i < 64; i++) ASSERT_EQ(piece[i], y[128 + i]) << kv_type_name(type);
  }
}

// The SIMD readers are bit-identical to the scalar ones (same operations in the same order).
TEST(KvFormat, SimdReadersEqualTheScalarOnesBitForBit) {
  const KvDequantKernels* simd = avx2_kv_dequant();
  const auto& f = cpu_features();
  if (!simd || !(f.avx2 && f.f16c)) GTEST_SKIP() << "no AVX2/F16C reader on this build or CPU";
  for (const int64_t head : {4, 8, 16, 32, 64}) {
    std::vector<float> x = test::random_floats(static_cast<size_t>(head * 12), 17);
    for (size_t i = 0; i < x.size(); i += 5) x[i] *= 9.0f;
    for (const KvType type : kQuantized) {
      const KvRowFormat a(type, head, scalar_kv_dequant()), b(type, head, *simd);
      std::vector<uint8_t> bytes(a.bytes(static_cast<int64_t>(x.size())));
      a.quantize(x.data(), bytes.data(), static_cast<int64_t>(x.size()));
      std::vector<float> ya(x.size()), yb(x.size());
      a.dequantize(bytes.data(), 0, ya.data(), static_cast<int64_t>(x.size()));
      b.dequantize(bytes.data(), 0, yb.data(), static_cast<int64_t>(x.size()));
      for (size_t i = 0; i < x.size(); i++)
        ASSERT_EQ(ya[i], yb[i]) << kv_type_name(type) << " head " << head << " " << i;
    }
  }
}

TEST(KvFormat, SizesAndGroupsFollowTheHeadSize) {
  EXPECT_EQ(KvRowFormat(KvType::Q8_0, 128).group(), 32);
  EXPECT_DOUBLE_EQ(KvRowFormat(KvType::Q8_0, 128).bits_per_value(), 8.5);
  EXPECT_DOUBLE_EQ(KvRowFormat(KvType::FP8, 128).bits_per_value(), 8.5);
  EXPECT_DOUBLE_EQ(KvRowFormat(KvType::Q4, 128).bits_per_value(), 5.0);
  EXPECT_DOUBLE_EQ(KvRowFormat(KvType::F16, 128).bits_per_value(), 16.0);
  EXPECT_EQ(KvRowFormat(KvType::Q4, 8).group(), 8);     // stories260K: heads of 8
  EXPECT_EQ(KvRowFormat(KvType::Q8_0, 40).group(), 8);  // a group never straddles heads
  // Bytes per token: 2 layers x (K + V) of 256 channels in q4 = 2 * 2 * 256 * 5 / 8.
  KvLayout l{2, 256, 256, 64, KvType::Q4, KvType::Q4};
  EXPECT_EQ(l.bytes_per_token(), 2 * 2 * 256 * 5 / 8);
  l.k_type = KvType::Q8_0;
  EXPECT_EQ(l.type_name(), "q8_0/q4");
}

TEST(KvFormat, AttentionOverAQuantizedCacheEqualsAttentionOverItsDequantizedRows) {
  const int n_head = 8, n_kv = 2, hd = 64, block = 16, n_pos = 70;
  const int64_t width = n_kv * hd;
  ThreadPool pool(2);
  for (const KvType type : kQuantized) {
    KvLayout layout{1, width, width, hd, type, type};
    PagedKvCache kv(layout, 8, block);
    kv.reserve(0, n_pos);
    std::vector<float> kf(static_cast<size_t>(8 * block * width)), vf(kf.size());
    for (int p = 0; p < n_pos; p++) {
      const auto k = test::random_floats(static_cast<size_t>(width), 100 + p);
      const auto v = test::random_floats(static_cast<size_t>(width), 900 + p);
      const int64_t slot = kv.slot(0, p);
      kv.write_k(0, slot, k.data());
      kv.write_v(0, slot, v.data());
      kv.read_k(0, slot, kf.data() + slot * width);
      kv.read_v(0, slot, vf.data() + slot * width);
    }
    // Decode-like (one token at the end) and prefill-like (the last 20 tokens).
    const int n_tok = 20;
    const auto q = test::random_floats(static_cast<size_t>(n_tok * n_head * hd), 7);
    std::vector<int32_t> pos(n_tok);
    std::vector<const int32_t*> tables(n_tok, kv.block_table(0));
    for (int t = 0; t < n_tok; t++) pos[t] = n_pos - n_tok + t;
    for (const AttentionKernel kernel : {AttentionKernel::Best, AttentionKernel::PerRow}) {
      std::vector<float> got(static_cast<size_t>(n_tok * n_head * hd)), want(got.size());
      const AttentionShape shape{n_head, n_kv, hd, 0.125f};
      attention_paged(pool, kv.layer_view(0), {n_tok, q.data(), got.data(), pos.data(), tables.data()}, shape, kernel);
      attention_paged(pool, PagedKvLayerView::f32(kf.data(), vf.data(), width, width, block),
                      {n_tok, q.data(), want.data(), pos.data(), tables.data()}, shape, kernel);
      for (size_t i = 0; i < got.size(); i++)
        ASSERT_NEAR(got[i], want[i], 1e-5) << kv_type_name(type) << " kernel " << static_cast<int>(kernel) << " " << i;
    }
  }
}

}  // namespace
}  // namespace kestrel

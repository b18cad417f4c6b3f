// The scalar model of the AMX tile instructions (hw/amx_tiles.h) against
// values worked out by hand from Intel's definitions: each byte's signedness
// in the four int8 products, accumulation onto C and 32-bit wraparound,
// tileloadd's zeroing and tilestored's extent, the faults a kernel bug would
// hit on the hardware, tdpbf16ps's order, rounding and denormals. The kernel
// body that runs on this model (bit for bit against the packed reference) is
// tested with the other packed kernels (test_packed_q8.cpp); here, Matmul
// routing batches to the tile kernel from the crossover on, the crossover
// itself, and the measured limits kept per ISA level.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <vector>

#include "core/thread_pool.h"
#include "hw/limits.h"
#include "hw/tuning.h"
#include "hw/amx_tiles.h"
#include "kernels/matmul.h"
#include "kernels/matmul_kernels.h"
#include "kernels/packed_q8.h"
#include "test_support.h"

namespace kestrel {
namespace {

// C (tile 0) = A (tile 1: rows x 4k bytes) x B (tile 2: k rows x 4n bytes), all configured.
TileConfig product_config(int rows, int k_bytes, int n) {
  TileConfig c;
  c.shape(0, rows, 4 * n);
  c.shape(1, rows, k_bytes);
  c.shape(2, k_bytes / 4, 4 * n);
  return c;
}

int32_t int8_product(void (TileModel::*op)(int, int, int), uint8_t a, uint8_t b, int32_t c0 = 0) {
  TileModel m;
  m.configure(product_config(1, 4, 1));
  const uint8_t av[4] = {a, 0, 0, 0}, bv[4] = {b, 0, 0, 0};
  m.load(0, &c0, 4);
  m.load(1, av, 4);
  m.load(2, bv, 4);
  (m.*op)(0, 1, 2);
  int32_t c;
  m.store(0, &c, 4);
  return c;
}

TEST(AmxTileModel, EachOperandIsSignedOrUnsignedAsTheMnemonicSays) {
  // 0xFF is -1 signed, 255 unsigned; 0xFE is -2 / 254.
  EXPECT_EQ(int8_product(&TileModel::dpbssd, 0xFF, 0xFE), 2);
  EXPECT_EQ(int8_product(&TileModel::dpbsud, 0xFF, 0xFE), -254);
  EXPECT_EQ(int8_product(&TileModel::dpbusd, 0xFF, 0xFE), -510);
  EXPECT_EQ(int8_product(&TileModel::dpbuud, 0xFF, 0xFE), 255 * 254);
  // Accumulated onto C, wrapping at 32 bits.
  EXPECT_EQ(int8_product(&TileModel::dpbssd, 0x02, 0x03, 100), 106);
  EXPECT_EQ(int8_product(&TileModel::dpbuud, 0x01, 0x01, INT32_MAX), INT32_MIN);
}

TEST(AmxTileModel, ProductSumsEveryGroupOfFourAlongK) {
  // 3 rows x K=8 times K=8 x 2 columns: B row k holds 4 consecutive K values of each column (the VNNI layout).
  TileModel m;
  m.configure(product_config(3, 8, 2));
  int8_t a[3][8], b[2][8];  // b[kk][4n + j] = column n's element 4kk + j
  int32_t want[3][2] = {};
  for (int r = 0; r < 3; r++)
    for (int e = 0; e < 8; e++) a[r][e] = static_cast<int8_t>(r * 8 + e - 12);
  for (int n = 0; n < 2; n++)
    for (int e = 0; e < 8; e++) b[e / 4][4 * n + e % 4] = static_cast<int8_t>((n + 1) * (e - 3));
  for (int r = 0; r < 3; r++)
    for (int n = 0; n < 2; n++)
      for (int e = 0; e < 8; e++) want[r][n] += a[r][e] * b[e / 4][4 * n + e % 4];
  m.zero(0);
  m.load(1, a, 8);
  m.load(2, b, 8);
  m.dpbssd(0, 1, 2);
  int32_t got[3][2];
  m.store(0, got, 8);
  for (int r = 0; r < 3; r++)
    for (int n = 0; n < 2; n++) EXPECT_EQ(got[r][n], want[r][n]) << r << "," << n;
}

TEST(AmxTileModel, LoadFillsRowsTimesColsbAndStoreWritesNoMore) {
  TileModel m;
  TileConfig c;
  c.shape(3, 2, 8);
  m.configure(c);
  std::vector<uint8_t> src(64, 0xAB), dst(64, 0x11);
  m.load(3, src.data(), 32);   // rows 0-1, bytes 0-7 of each, rows 32 bytes apart
  m.store(3, dst.data(), 16);  // written 16 bytes apart
  for (int i = 0; i < 64; i++) {
    const bool inside = (i < 8) || (i >= 16 && i < 24);
    EXPECT_EQ(dst[i], inside ? 0xAB : 0x11) << "byte " << i;
  }
}

TEST(AmxTileModel, FaultsWhereTheHardwareWould) {
  TileModel m;
  uint8_t buf[1024] = {};
  EXPECT_THROW(m.load(0, buf, 64), std::logic_error);  // no configuration
  TileConfig bad;
  bad.palette_id = 2;
  EXPECT_THROW(m.configure(bad), std::logic_error);
  TileConfig tall;
  tall.shape(0, 17, 64);
  EXPECT_THROW(m.configure(tall), std::logic_error);
  TileConfig wide;
  wide.shape(0, 16, 68);
  EXPECT_THROW(m.configure(wide), std::logic_error);
  m.configure(product_config(4, 16, 8));
  EXPECT_THROW(m.load(5, buf, 64), std::logic_error);  // tile 5 not configured
  EXPECT_NO_THROW(m.dpbsud(0, 1, 2));
  EXPECT_THROW(m.dpbsud(0, 2, 1), std::logic_error);  // A and B swapped: shapes do not chain
  EXPECT_THROW(m.dpbsud(0, 0, 2), std::logic_error);  // C is A
  TileConfig off;
  off.palette_id = 0;  // palette 0 releases the tiles
  m.configure(off);
  EXPECT_FALSE(m.configured());
  EXPECT_THROW(m.zero(0), std::logic_error);
}

uint16_t bf16(float f) { return static_cast<uint16_t>(std::bit_cast<uint32_t>(f) >> 16); }

float bf16_product(float c0, std::initializer_list<float> a, std::initializer_list<float> b) {
  TileModel m;
  m.configure(product_config(1, 4, 1));
  uint16_t av[2], bv[2];
  int i = 0;
  for (float v : a) av[i++] = bf16(v);
  i = 0;
  for (float v : b) bv[i++] = bf16(v);
  m.load(0, &c0, 4);
  m.load(1, av, 4);
  m.load(2, bv, 4);
  m.dpbf16ps(0, 1, 2);
  float c;
  m.store(0, &c, 4);
  return c;
}

TEST(AmxTileModel, Bf16PairsAddOneProductAtATime) {
  EXPECT_EQ(bf16_product(1.0f, {1.5f, 0.5f}, {2.0f, 4.0f}), 6.0f);  // 1 + 3 + 2
  // Each addition rounds: 1 + 2^-24 is 1 (a tie, to even), twice; one rounding of the pair's sum would give
  // 1 + 2^-23.
  const float tiny = std::ldexp(1.0f, -12);
  EXPECT_EQ(bf16_product(1.0f, {tiny, tiny}, {tiny, tiny}), 1.0f);
  // A denormal bf16 input is zero; a denormal result is flushed to zero.
  const float denormal = std::bit_cast<float>(uint32_t{0x00010000});
  EXPECT_EQ(bf16_product(0.0f, {denormal, 0.0f}, {std::ldexp(1.0f, 100), 0.0f}), 0.0f);
  EXPECT_EQ(bf16_product(0.0f, {std::ldexp(1.0f, -70), 0.0f}, {std::ldexp(1.0f, -70), 0.0f}), 0.0f);
}

// A PackedGemm that counts its calls and runs the tile model's kernel.
std::atomic<int> g_tile_calls{0};
const PackedGemm* g_model = nullptr;
void counting_gemm(const PackedWeight& w, int64_t g0, int64_t g1, const PackedActivations& x, float* y, int64_t ldy,
                   int64_t token_chunk) {
  g_tile_calls++;
  g_model->gemm(w, g0, g1, x, y, ldy, token_chunk);
}

// Batches from tile_min_tokens on go to the tile kernel, smaller ones (and single tokens) to the streaming one,
// with the same results bit for bit (both equal the packed reference).
TEST(AmxTileModel, MatmulRoutesBatchesFromTheCrossoverToTheTiles) {
  g_model = packed_tile_model_gemm();
  if (!g_model) GTEST_SKIP() << "no AVX-512 VNNI on this CPU/build: the tile model's kernel body cannot run";
  std::cout << "[ path     ] tile kernel: " << g_model->isa << "\n";
  const PackedGemm counting{"counting", counting_gemm, "", ""};
  const MatmulKernels& base = matmul_kernels_for(IsaLevel::Avx512);
  const MatmulKernels with_tiles = base.with_tile_gemm(&counting);
  ThreadPool pool(2);
  for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q6_K}) {
    auto m = test::quantized_matrix(type, 40, 512, 7);
    m.w.packed = pack_weight(m.w);
    Tuning t = tuning();
    t.tile_min_tokens = 4;
    Matmul streaming(base, t), tiles(with_tiles, t);
    for (int64_t n : {1, 3, 4, 9}) {
      const auto x = test::random_floats(static_cast<size_t>(n * 512), static_cast<uint32_t>(n));
      std::vector<float> want(n * 40), got(n * 40);
      streaming.run(pool, m.w, x.data(), n, want.data());
      g_tile_calls = 0;
      tiles.run(pool, m.w, x.data(), n, got.data());
      EXPECT_EQ(g_tile_calls.load() > 0, n >= 4) << type_name(type) << " n=" << n;
      EXPECT_EQ(got, want) << type_name(type) << " n=" << n;
    }
  }
}

TEST(Tuning, TileCrossoverIsWhereTheTilesStayFaster) {
  using P = CrossoverPoint;
  EXPECT_EQ(tile_crossover({{1, 1.0, 2.0}, {2, 1.0, 1.5}, {4, 1.0, 0.9}, {8, 1.0, 0.5}}), 4);
  // A faster point below a slower one does not count: the tiles must stay faster from there on.
  EXPECT_EQ(tile_crossover({{1, 1.0, 0.9}, {2, 1.0, 1.1}, {4, 1.0, 0.9}, {8, 1.0, 0.5}}), 4);
  EXPECT_EQ(tile_crossover({P{1, 1.0, 0.5}, P{2, 1.0, 0.5}}), 1);
  // Never faster: past the largest batch measured.
  EXPECT_EQ(tile_crossover({P{1, 1.0, 2.0}, P{128, 1.0, 1.5}}), 129);
  EXPECT_EQ(tile_crossover({}), Tuning{}.tile_min_tokens);
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {

// The cached limits are the level's: a run at a lower KESTREL_ISA keeps its own file (its peaks are other
// instructions'), and the CPU's own level never reads them.
TEST(Limits, ALoweredLevelCachesItsOwnLimits) {
  test::TempDir dir;
  setenv("KESTREL_CACHE_DIR", dir.file("cache").c_str(), 1);
  unsetenv("KESTREL_ISA");
  MeasuredLimits native;
  native.threads = 1;
  native.read_bandwidth_gbs = 11.0;
  native.int8_isa = "native";
  store_limits(native);
  setenv("KESTREL_ISA", "scalar", 1);
  const bool lowered = best_isa() != IsaLevel::Scalar;
  if (lowered) {
    EXPECT_FALSE(load_cached_limits(1).has_value()) << "the scalar level read the native level's limits";
    MeasuredLimits scalar = native;
    scalar.read_bandwidth_gbs = 22.0;
    store_limits(scalar);
    ASSERT_TRUE(load_cached_limits(1).has_value());
    EXPECT_EQ(load_cached_limits(1)->read_bandwidth_gbs, 22.0);
  }
  unsetenv("KESTREL_ISA");
  ASSERT_TRUE(load_cached_limits(1).has_value());
  EXPECT_EQ(load_cached_limits(1)->read_bandwidth_gbs, 11.0);
  unsetenv("KESTREL_CACHE_DIR");
  if (!lowered) GTEST_SKIP() << "this CPU/build's best level is scalar: nothing lower to keep apart";
}

}  // namespace
}  // namespace kestrel

#ifdef KESTREL_HAVE_AVX2_KERNELS
#include "hw/cpu_features.h"
#include "hw/peak_kernels.h"

namespace kestrel {
namespace {

// vpmaddubsw on one 16-bit lane: two unsigned bytes times two signed ones, summed and saturated.
int16_t maddubs_lane(uint16_t u, int8_t s) {
  const int32_t sum = static_cast<int32_t>(u & 0xFF) * s + static_cast<int32_t>(u >> 8) * s;
  return static_cast<int16_t>(std::clamp(sum, -32768, 32767));
}

// The AVX2 int8 peak probe multiplies every iteration: its result is the scalar model's of that many chained
// multiplies (a probe whose products were loop-invariant once timed only its adds, and reported twice the
// multiplier's throughput).
TEST(Limits, Avx2Int8ProbeMultipliesEveryIteration) {
  if (!cpu_features().avx2) GTEST_SKIP() << "no AVX2 on this CPU: the probe is never called";
  for (int64_t iterations : {0, 1, 2, 3, 10}) {
    uint32_t sum = 0;
    for (int i = 0; i < 12; i++) {
      const uint32_t word = 0x01020304u + static_cast<uint32_t>(i);
      uint16_t lo = static_cast<uint16_t>(word), hi = static_cast<uint16_t>(word >> 16);
      for (int64_t it = 0; it < iterations; it++) {
        lo = static_cast<uint16_t>(maddubs_lane(lo, -3));
        hi = static_cast<uint16_t>(maddubs_lane(hi, -3));
      }
      sum += static_cast<uint32_t>(lo) | static_cast<uint32_t>(hi) << 16;
    }
    EXPECT_EQ(peak::int8_dot_avx2(iterations), static_cast<int32_t>(sum)) << iterations << " iterations";
  }
}

}  // namespace
}  // namespace kestrel
#endif

// The repacked layouts (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4,
// IQ4_XS, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) and their kernels: the VNNI kernel equals
// the scalar reference of the packed arithmetic bit for bit, and both agree
// with a double-precision dot of the dequantized weights (the format's own
// dequantizer, itself checked against llama.cpp's files) and activations, on
// odd shapes (partial row groups, single tokens, token counts around the
// tile); Matmul on packed weights agrees with the file layout's row dots.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>

#include "formats/block_formats.h"
#include "formats/fp16.h"
#include "core/error.h"
#include "kernels/dot.h"
#include "kernels/kquant_dot.h"
#include "kernels/matmul.h"
#include "kernels/matmul_kernels.h"
#include "kernels/packed_q8.h"
#include "test_support.h"

namespace kestrel {
namespace {

using test::QuantMatrix;

const GgmlType kCompactTypes[] = {GgmlType::Q8_0,  GgmlType::Q4_0,   GgmlType::Q4_1,  GgmlType::Q5_0,
                                  GgmlType::Q5_1,  GgmlType::IQ4_NL, GgmlType::MXFP4, GgmlType::IQ4_XS,
                                  GgmlType::Q2_K,  GgmlType::Q3_K,   GgmlType::Q4_K,  GgmlType::Q5_K,
                                  GgmlType::Q6_K};

bool fits(GgmlType type, int64_t cols) { return cols % traits(type).block_size == 0; }

QuantMatrix random_matrix(GgmlType type, int64_t rows, int64_t cols, uint32_t seed) {
  return test::quantized_matrix(type, rows, cols, seed);
}

struct Acts {
  std::vector<float> dequantized;  // what the packed values stand for, [n][cols]
  std::vector<uint8_t> packed;
  PackedActivations view;
};

// Activations packed for weights of kind `kind`: Q8_0 blocks, or Q8_K super-blocks (one scale per 256, as the
// k-quant kernels require) when `per_256` (sums exact in float either way, also for Q4_1/Q5_1).
Acts random_activations(PackedKind kind, int64_t n, int64_t cols, uint32_t seed, bool per_256 = false) {
  Acts a;
  const int64_t nb = cols / kQK8_0;
  const auto f = test::random_floats(n * cols, seed);
  a.packed.assign(packed_activation_bytes(n, nb), 0xAB);  // garbage where nothing is written
  a.dequantized.resize(n * cols);
  const int64_t tiles = (n + PackedActivations::kTokensPerTile - 1) / PackedActivations::kTokensPerTile;
  if (per_256) {
    std::vector<BlockQ8_K> q(n * cols / 256);
    for (int64_t t = 0; t < n; t++) quantize_row_q8_K_scalar(f.data() + t * cols, q.data() + t * cols / 256, cols);
    for (size_t i = 0; i < a.dequantized.size(); i++) a.dequantized[i] = q[i / 256].d * q[i / 256].qs[i % 256];
    pack_activations_q8k(kind, q.data(), n, nb, 0, tiles, a.packed.data());
  } else {
    std::vector<BlockQ8_0> q(n * nb);
    for (int64_t t = 0; t < n; t++)
      quantize_row_q8_0_ref(f.data() + t * cols, q.data() + t * nb, cols, Rounding::HalfToEven);
    dequantize_row_q8_0(q.data(), a.dequantized.data(), n * cols);
    pack_activations(kind, q.data(), n, nb, 0, tiles, a.packed.data());
  }
  a.view = {a.packed.data(), n, nb};
  return a;
}

bool needs_per_256(GgmlType type) {
  return type == GgmlType::Q2_K || type == GgmlType::Q3_K || type == GgmlType::Q4_K || type == GgmlType::Q5_K ||
         type == GgmlType::Q6_K;
}

constexpr float kSentinel = -12345.0f;

TEST(PackedQ8, ReferenceAgreesWithDequantizedDoubleDot) {
  for (GgmlType type : kCompactTypes)
    for (int64_t rows : {1, 15, 16, 17, 40})
      for (int64_t cols : {32, 96, 512}) {
        if (!fits(type, cols)) continue;
        const int64_t n = 3, ldy = rows + 5;
        const auto m = random_matrix(type, rows, cols, static_cast<uint32_t>(rows * 7 + cols));
        ASSERT_TRUE(packable(m.w)) << type_name(type);
        const auto packed = pack_weight(m.w);
        const int64_t unit = traits(type).block_size == 256 ? 256 : 64;  // a super-block, a block pair
        // Q3_K's, Q4_K's and Q5_K's 6-bit scales take a byte each: 4 bytes a row per super-block more than
        // the file.
        const bool byte_scales = type == GgmlType::Q3_K || type == GgmlType::Q4_K || type == GgmlType::Q5_K;
        const size_t extra = byte_scales ? 4 * cols / 256 : 0;
        EXPECT_EQ(packed->n_groups * packed->group_bytes(),
                  static_cast<size_t>(packed->n_groups * 16) * (row_bytes(type, (cols + unit - 1) / unit * unit) + extra))
            << type_name(type) << ": the file's bytes, padded to whole groups and units";
        const auto a = random_activations(packed->kind, n, cols, 99, needs_per_256(type));
        std::vector<float> y(n * ldy, kSentinel);
        packed_gemm_reference(*packed, 0, packed->n_groups, a.view, y.data(), ldy);
        std::vector<float> wr(cols), xr(cols);
        for (int64_t t = 0; t < n; t++) {
          std::copy_n(a.dequantized.data() + t * cols, cols, xr.data());
          for (int64_t r = 0; r < rows; r++) {
            dequantize_weight_row(m.w, r, wr.data());
            double ref = 0, mag = 0;
            for (int64_t c = 0; c < cols; c++) ref += double(wr[c]) * xr[c], mag += std::fabs(double(wr[c]) * xr[c]);
            EXPECT_NEAR(y[t * ldy + r], ref, 1e-5 * mag + 1e-6)
                << type_name(type) << " " << rows << "x" << cols << " r" << r << " t" << t;
          }
          for (int64_t r = rows; r < ldy; r++) EXPECT_EQ(y[t * ldy + r], kSentinel) << "wrote past the last row";
        }
      }
}


void expect_kernel_equals_reference(const PackedGemm& simd) {
  std::cout << "[ path     ] packed gemm: " << simd.isa << "\n";
  for (GgmlType type : kCompactTypes)
    for (int64_t rows : {1, 16, 33, 70})
      for (int64_t cols : {32, 160, 2080, 768})
        for (int64_t n : {1, 2, 7, 8, 9, 19}) {
          if (!fits(type, cols)) continue;
          const int64_t ldy = rows + 3;
          const auto m = random_matrix(type, rows, cols, static_cast<uint32_t>(rows + cols));
          const auto packed = pack_weight(m.w);
          const auto a = random_activations(packed->kind, n, cols, static_cast<uint32_t>(n), needs_per_256(type));
          std::vector<float> want(n * ldy, kSentinel), got(n * ldy, kSentinel);
          packed_gemm_reference(*packed, 0, packed->n_groups, a.view, want.data(), ldy);
          // A token chunk smaller than the token count and a group range split
          // in two.
          const int64_t mid = packed->n_groups / 2;
          simd.gemm(*packed, 0, mid, a.view, got.data(), ldy, 5);
          simd.gemm(*packed, mid, packed->n_groups, a.view, got.data(), ldy, 5);
          for (size_t i = 0; i < want.size(); i++)
            ASSERT_EQ(got[i], want[i]) << simd.isa << " " << type_name(type) << " " << rows << "x" << cols
                                       << " n=" << n << " at " << i;
        }
}

TEST(PackedQ8, SimdKernelsEqualReferenceBitForBit) {
  const auto tables = runnable_packed_gemms();
  if (tables.empty()) GTEST_SKIP() << "no AVX2 on this CPU/build: only the reference runs";
  for (const PackedGemm* t : tables) expect_kernel_equals_reference(*t);
}

// Every quant byte and high bit of a packed matrix set to `fill` (its scales as quantized).
void fill_packed_levels(const PackedWeight& pw, uint8_t fill) {
  auto writable = [](const void* p) { return const_cast<uint8_t*>(static_cast<const uint8_t*>(p)); };
  const bool high_bits = pw.kind == PackedKind::Q3_K || pw.kind == PackedKind::Q5_K || pw.kind == PackedKind::Q6_K;
  for (int64_t g = 0; g < pw.n_groups; g++)
    for (int64_t b = 0; b < pw.n_blocks; b++) {
      std::memset(writable(pw.block_quants(g, b)), fill, pw.quant_bytes_per_block());
      if (pw.has_qh_of(pw.kind)) std::memset(writable(pw.block_qh(g, b)), fill, 4 * PackedWeight::kRowsPerGroup);
      if (high_bits)
        std::memset(writable(pw.high_bits(g, b)), fill,
                    4 * PackedWeight::kRowsPerGroup * (pw.kind == PackedKind::Q6_K ? 2 : 1));
    }
}

// The extremes the int16 sums of the AVX2 kernels must hold without saturating: every weight at its
// largest level (0xFF: 15, 31, 63, Q8_0's 127, IQ4's 113, MXFP4's -12), its smallest (0x00: Q8_0's -128,
// IQ4's -127), MXFP4's 12 and IQ4's -10 (0x77, 0x88), against activations all +127 or all -127.
TEST(PackedQ8, SimdKernelsHoldExtremeLevels) {
  const auto tables = runnable_packed_gemms();
  if (tables.empty()) GTEST_SKIP() << "no AVX2 on this CPU/build: only the reference runs";
  for (GgmlType type : kCompactTypes) {
    const int64_t rows = 16, cols = 256;
    const auto m = random_matrix(type, rows, cols, 11);
    for (uint8_t fill : {uint8_t{0xFF}, uint8_t{0x00}, uint8_t{0x77}, uint8_t{0x88}}) {
      const auto packed = pack_weight(m.w);
      fill_packed_levels(*packed, fill);
      for (int sign : {1, -1}) {
        const int64_t n = 5, nb = cols / kQK8_0;
        std::vector<uint8_t> bytes(packed_activation_bytes(n, nb));
        if (needs_per_256(type)) {
          std::vector<BlockQ8_K> q(n * cols / 256);
          for (auto& b : q) {
            b = BlockQ8_K{};
            b.d = 0.01f;
            std::fill(std::begin(b.qs), std::end(b.qs), static_cast<int8_t>(127 * sign));
            for (int j = 0; j < 16; j++) b.bsums[j] = static_cast<int16_t>(16 * 127 * sign);
          }
          pack_activations_q8k(packed->kind, q.data(), n, nb, 0, 1, bytes.data());
        } else {
          std::vector<BlockQ8_0> q(n * nb);
          for (auto& b : q) {
            b.d = fp32_to_fp16(0.01f);
            std::fill(std::begin(b.qs), std::end(b.qs), static_cast<int8_t>(127 * sign));
          }
          pack_activations(packed->kind, q.data(), n, nb, 0, 1, bytes.data());
        }
        const PackedActivations view{bytes.data(), n, nb};
        std::vector<float> want(n * rows), got(n * rows);
        packed_gemm_reference(*packed, 0, packed->n_groups, view, want.data(), rows);
        for (const PackedGemm* t : tables) {
          t->gemm(*packed, 0, packed->n_groups, view, got.data(), rows, 8);
          ASSERT_EQ(got, want) << t->isa << " " << type_name(type) << " quants 0x" << std::hex << int{fill};
        }
      }
    }
  }
}

TEST(PackedQ8, MatmulWithPackedWeightsMatchesTheFileLayout) {
  // The whole Matmul path (activation quantization, row split over threads)
  // against the unpacked kernels: same quantized inputs, different summation
  // order, so equal to float rounding (Q4_1/Q5_1 meet Q8_1 activations with
  // their stored sums on both paths).
  const int64_t rows = 50, cols = 256;
  if (!packed_gemm()) GTEST_SKIP() << "no AVX2 on this CPU/build: the kernel table has no repacked entries";
  for (GgmlType type : kCompactTypes) {
    ASSERT_TRUE(matmul_kernels().repacks(type)) << type_name(type);
    auto m = random_matrix(type, rows, cols, 3);
    Weight packed_w = m.w;
    packed_w.packed = pack_weight(m.w);
    for (int64_t n : {1, 11}) {
      const auto x = test::random_floats(n * cols, 4);
      ThreadPool pool(2);
      Matmul mm;
      std::vector<float> plain(n * rows), packed(n * rows);
      mm.run(pool, m.w, x.data(), n, plain.data());
      mm.run(pool, packed_w, x.data(), n, packed.data());
      for (int64_t i = 0; i < n * rows; i++)
        EXPECT_NEAR(packed[i], plain[i], 1e-4f * (1 + std::fabs(plain[i]))) << type_name(type) << " n " << n << " at " << i;
    }
  }
}

TEST(PackedQ8, OnlyQuantizedMatricesArePacked) {
  const auto f16 = random_matrix(GgmlType::F16, 4, 32, 1);
  EXPECT_FALSE(packable(f16.w));
  EXPECT_THROW(pack_weight(f16.w), Error);
  const auto q8 = random_matrix(GgmlType::Q8_0, 4, 32, 1);
  EXPECT_TRUE(packable(q8.w));
  EXPECT_FALSE(Matmul::can_share_input(q8.w, [&] {
    Weight p = q8.w;
    p.packed = pack_weight(q8.w);
    return p;
  }()));
}

}  // namespace
}  // namespace kestrel

// The one kernel table (kernels/matmul_kernels.h): every computable weight
// type has an entry at every ISA level, each level's entries read only tables
// that level allows, repacked entries exist exactly where the packed GEMM
// runs, and a weight type with no kernel is refused at load, naming the
// tensor, the type and the ISA.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>

#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/fp16.h"
#include "backend/backend.h"
#include "kernels/matmul.h"
#include "kernels/matmul_kernels.h"
#include "test_support.h"

namespace kestrel {
namespace {

constexpr GgmlType kComputable[] = {
    GgmlType::F32,   GgmlType::F16,    GgmlType::BF16,  GgmlType::Q8_0,   GgmlType::Q4_0,   GgmlType::Q4_1,
    GgmlType::Q5_0,  GgmlType::Q5_1,   GgmlType::Q2_K,  GgmlType::Q3_K,   GgmlType::Q4_K,   GgmlType::Q5_K,
    GgmlType::Q6_K,  GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4, GgmlType::IQ2_XXS, GgmlType::IQ1_S,
    GgmlType::KESTREL_FP8_E4M3,
};

TEST(MatmulKernels, EveryLevelHasAnEntryPerComputableTypeWithinItsIsa) {
  for (IsaLevel isa : {IsaLevel::Scalar, IsaLevel::Avx2, IsaLevel::Avx512, IsaLevel::Amx}) {
    if (static_cast<int>(isa) > static_cast<int>(selected_isa())) continue;  // the CPU cannot run it
    const MatmulKernels& k = matmul_kernels_for(isa);
    EXPECT_EQ(k.isa(), isa);
    for (GgmlType t : kComputable) {
      const MatmulKernel* e = k.find(t);
      ASSERT_NE(e, nullptr) << type_name(t) << " at " << isa_name(isa);
      EXPECT_EQ(e->type, t);
      EXPECT_FALSE(e->repacked);
      EXPECT_NE(e->one, nullptr) << type_name(t);
      EXPECT_NE(e->many, nullptr) << type_name(t);
      EXPECT_GE(e->granule_one, 1);
      EXPECT_GE(e->granule_many, 1);
      EXPECT_FALSE(e->name.empty());
      if (e->prep == ActPrep::Quantized || e->prep == ActPrep::Packed) {
        EXPECT_NE(e->quantize, nullptr) << type_name(t);
      }
      // A scalar level reads no SIMD tile; the tiles it may read are the level's own.
      if (isa == IsaLevel::Scalar) {
        EXPECT_EQ(e->int8, nullptr);
        EXPECT_EQ(e->bf16, nullptr);
        EXPECT_EQ(e->floats, nullptr);
        EXPECT_NE(e->name.find("scalar"), std::string::npos) << e->name;
      }
      if (e->int8) {
        EXPECT_EQ(e->int8, int8_tiles(isa));
      }
      if (e->bf16) {
        EXPECT_EQ(e->bf16, bf16_tiles(isa));
      }
      if (e->floats) {
        EXPECT_EQ(e->floats, float_tiles(isa));
      }
      // Repacked entries exactly where the packed GEMM runs.
      EXPECT_EQ(k.repacks(t), packed_gemm(isa) != nullptr && has_packed_kind(t)) << type_name(t);
    }
  }
}

// The kernel kinds are rows in order of preference: a type gets the fastest kind its level has, and the one it
// replaces only where the level lacks that unit.
TEST(MatmulKernels, ATypeRunsTheFirstKernelKindItsLevelHas) {
  for (IsaLevel isa : {IsaLevel::Scalar, IsaLevel::Avx2, IsaLevel::Avx512, IsaLevel::Amx}) {
    if (static_cast<int>(isa) > static_cast<int>(selected_isa())) continue;
    const MatmulKernels& k = matmul_kernels_for(isa);
    const MatmulKernel& bf16 = *k.find(GgmlType::BF16);
    EXPECT_EQ(bf16.prep, bf16_tiles(isa) ? ActPrep::Bf16 : ActPrep::Bf16Rounded) << isa_name(isa);
    EXPECT_EQ(bf16.bf16, bf16_tiles(isa)) << isa_name(isa);
    for (GgmlType t : {GgmlType::F32, GgmlType::F16}) {
      EXPECT_EQ(k.find(t)->floats, float_tiles(isa)) << type_name(t) << " at " << isa_name(isa);
      EXPECT_EQ(k.find(t)->granule_many, float_tiles(isa) ? 4 : 1) << type_name(t) << " at " << isa_name(isa);
    }
    for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0}) {
      EXPECT_EQ(k.find(t)->int8, int8_tiles(isa)) << type_name(t) << " at " << isa_name(isa);
      EXPECT_EQ(k.find(t)->lane_sums, int8_tiles(isa) != nullptr) << type_name(t) << " at " << isa_name(isa);
    }
    // Q4_K, Q5_K and Q6_K take the k-quant kernels, not the general block-format row.
    for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
      EXPECT_NE(k.find(t)->kquant, nullptr) << type_name(t) << " at " << isa_name(isa);
      EXPECT_EQ(k.find(t)->qdot, nullptr) << type_name(t) << " at " << isa_name(isa);
    }
    // A repacked entry for every plain one whose blocks can be packed, where the level packs.
    for (GgmlType t : kComputable)
      if (const MatmulKernel* r = k.find(t, true)) {
        EXPECT_EQ(r->prep, ActPrep::Packed);
        EXPECT_EQ(r->packed, packed_gemm(isa));
        EXPECT_EQ(r->packed_tiles, packed_tile_gemm(isa));
      }
  }
}

TEST(MatmulKernels, AWeightWithoutAKernelIsRefusedAtLoadNamingTypeAndIsa) {
  std::vector<uint8_t> bytes(4096);
  const Weight w{"blk.0.attn_q.weight", GgmlType::TQ1_0, {256, 4}, bytes.data(), bytes.size(), {}};
  auto be = make_cpu_backend(1);
  try {
    be->prepare_weight(w);
    FAIL() << "a TQ1_0 weight was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("blk.0.attn_q.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find(type_name(GgmlType::TQ1_0)), std::string::npos) << msg;
    EXPECT_NE(msg.find(isa_name(selected_isa())), std::string::npos) << msg;
  }
}


// BF16 batches follow llama.cpp's call: a plain matrix whose rows are a multiple of 4 and columns of the
// vector width goes through its GEMM's order (no longer the row dot's), a routed expert's (ggml_mul_mat_id)
// and any other shape keep the row dot's, as do single tokens; activations rounded to BF16 in each case.
TEST(MatmulKernels, Bf16BatchesTakeLlamaCppsOrderForTheCall) {
  bool ran = false;
  for (IsaLevel isa : {IsaLevel::Avx2, IsaLevel::Avx512}) {
    if (static_cast<int>(isa) > static_cast<int>(selected_isa())) continue;
    const MatmulKernels& k = matmul_kernels_for(isa);
    const MatmulKernel* e = k.find(GgmlType::BF16);
    ASSERT_NE(e, nullptr);
    if (!e->bf16 && !(e->floats && e->floats->ggml_width)) continue;
    ran = true;
    std::cout << "[ path     ] bf16 batches: " << e->name << "\n";
    ThreadPool pool(2);
    Matmul mm(k);
    for (int64_t rows : {8, 6})
      for (bool expert : {false, true}) {
        const int64_t cols = 256, n = 5;
        auto m = test::quantized_matrix(GgmlType::BF16, rows, cols, 3);
        m.w.routed_expert = expert;
        const auto x = test::random_floats(static_cast<size_t>(n * cols), 4);
        std::vector<float> batch(n * rows), one(rows);
        mm.run(pool, m.w, x.data(), n, batch.data());
        const bool gemm_order = !expert && rows % 4 == 0;
        int same_as_single = 0;
        for (int64_t t = 0; t < n; t++) {
          mm.run(pool, m.w, x.data() + t * cols, 1, one.data());
          for (int64_t r = 0; r < rows; r++) same_as_single += batch[t * rows + r] == one[r];
        }
        // The row dot's order gives each token what it gets alone; the GEMM's differs in some outputs.
        if (gemm_order) EXPECT_LT(same_as_single, n * rows) << isa_name(isa) << " " << rows << " rows";
        else EXPECT_EQ(same_as_single, n * rows) << isa_name(isa) << " " << rows << " rows, expert " << expert;
      }
  }
  if (!ran) GTEST_SKIP() << "no BF16 batch kernels on this CPU/build";
}


// A MoE layer's weighted sum (Backend::scatter_add_rows) adds in the order given, each product rounded before
// the sum (ggml_mul, then ggml_add rank after rank), reading source rows through src_rows: with values where
// the order of the additions and an FMA both change the float result.
TEST(BackendOps, WeightedRowSumsAddInTheGivenOrderWithRoundedProducts) {
  auto be = make_cpu_backend(1);
  const float big = 16777216.0f;  // 2^24: adding 1 to it is lost, adding 2 is not
  std::vector<float> src = {1.0f, big, -big, 1.0f / 3.0f};  // four one-wide rows
  std::vector<float> dst(2, 0.0f);
  const int64_t rows[] = {0, 0, 0, 1};
  const int64_t order[] = {1, 0, 2, 3};  // row 0: big, then 1 (lost), then -big: 0; row 1: 3 x (1/3)
  const float w[] = {1.0f, 1.0f, 1.0f, 3.0f};
  auto* raw = be.get();
  raw->scatter_add_rows(raw->host_view(dst.data()), raw->host_view(src.data()), rows, w, 4, 1, order);
  EXPECT_EQ(dst[0], 0.0f);  // in src row order (1, big, -big) it would be 1
  // 3 x fl(1/3) is 1 + 2^-25, which rounds to 1: added to -1 it gives 0; fused with the sum, 2^-25.
  std::vector<float> acc = {-1.0f};
  const int64_t one[] = {0};
  const int64_t src_third[] = {3};
  raw->scatter_add_rows(raw->host_view(acc.data()), raw->host_view(src.data()), one, w + 3, 1, 1, src_third);
  EXPECT_EQ(acc[0], 0.0f) << "the product was fused with the sum";
}

}  // namespace
}  // namespace kestrel

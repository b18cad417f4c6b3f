// The IQ1-IQ3 formats (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M)
// against ggml itself: tests/data/iq_reference.bin holds blocks that ggml's
// quantizers wrote, ggml's dequantization of them, a Q8_K activation row
// from ggml's quantize_row_q8_K and the dots of ggml's generic (scalar)
// and native (AVX) vec_dot kernels (tests/data/README.md says how it was
// made). Then every SIMD table this CPU runs is checked against the scalar
// one on random blocks — every bit pattern of the layouts, odd lengths.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include "formats/block_formats.h"
#include "formats/fp16.h"
#include "formats/iq_formats.h"
#include "hw/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/qdot.h"
#include "gguf/gguf.h"
#include "runtime/loaded_model.h"
#include "test_support.h"

namespace kestrel {
namespace {

constexpr GgmlType kIqTypes[] = {GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S, GgmlType::IQ3_XXS,
                                 GgmlType::IQ3_S,   GgmlType::IQ1_S,  GgmlType::IQ1_M};

struct GgmlCase {
  GgmlType type;
  std::vector<uint8_t> blocks;            // rows x row bytes, as ggml_quantize_chunk wrote them
  std::vector<float> dequantized;         // ggml's to_float of those blocks
  std::vector<float> generic, native;     // ggml's vec_dot of each row with the activation row
};

struct GgmlReference {
  int64_t rows = 0, cols = 0;
  std::vector<float> x, importance;      // the weights quantized and the importance row used
  std::vector<uint8_t> activation;       // one Q8_K row
  std::vector<GgmlCase> cases;
};

GgmlReference read_reference() {
  const std::string bytes = test::read_text(std::string(KESTREL_SOURCE_DIR) + "/tests/data/iq_reference.bin");
  size_t at = 0;
  auto take = [&](void* dst, size_t n) {
    if (at + n > bytes.size()) throw std::runtime_error("iq_reference.bin is truncated");
    std::memcpy(dst, bytes.data() + at, n);
    at += n;
  };
  char magic[8];
  take(magic, 8);
  if (std::memcmp(magic, "KIQREF01", 8) != 0) throw std::runtime_error("iq_reference.bin: bad magic");
  uint32_t h[4];
  take(h, sizeof h);
  GgmlReference r;
  r.rows = h[0], r.cols = h[1];
  const size_t n = static_cast<size_t>(r.rows * r.cols);
  r.x.resize(n), r.importance.resize(static_cast<size_t>(r.cols)), r.activation.resize(h[3]);
  take(r.x.data(), n * 4), take(r.importance.data(), r.importance.size() * 4), take(r.activation.data(), h[3]);
  for (uint32_t k = 0; k < h[2]; k++) {
    uint32_t th[2];
    take(th, sizeof th);
    GgmlCase c{static_cast<GgmlType>(th[0]), std::vector<uint8_t>(th[1] * static_cast<size_t>(r.rows)),
               std::vector<float>(n), std::vector<float>(static_cast<size_t>(r.rows)),
               std::vector<float>(static_cast<size_t>(r.rows))};
    take(c.blocks.data(), c.blocks.size()), take(c.dequantized.data(), n * 4);
    take(c.generic.data(), c.generic.size() * 4), take(c.native.data(), c.native.size() * 4);
    r.cases.push_back(std::move(c));
  }
  if (at != bytes.size()) throw std::runtime_error("iq_reference.bin has trailing bytes");
  return r;
}

TEST(IqFormats, ReferenceCoversEveryType) {
  const GgmlReference r = read_reference();
  ASSERT_EQ(r.cases.size(), std::size(kIqTypes));
  for (size_t k = 0; k < r.cases.size(); k++) {
    EXPECT_EQ(r.cases[k].type, kIqTypes[k]);
    EXPECT_EQ(r.cases[k].blocks.size(), row_bytes(kIqTypes[k], r.cols) * static_cast<size_t>(r.rows));
    EXPECT_TRUE(traits(kIqTypes[k]).computable);
  }
}

TEST(IqFormats, DequantizationEqualsGgmlBitForBit) {
  const GgmlReference r = read_reference();
  for (const GgmlCase& c : r.cases) {
    std::vector<float> got(c.dequantized.size());
    const size_t rb = row_bytes(c.type, r.cols);
    for (int64_t row = 0; row < r.rows; row++)
      dequantize_row(c.type, c.blocks.data() + row * rb, got.data() + row * r.cols, r.cols);
    int nonzero = 0;
    for (size_t i = 0; i < got.size(); i++) {
      ASSERT_EQ(got[i], c.dequantized[i]) << type_name(c.type) << " element " << i;
      nonzero += got[i] != 0;
    }
    EXPECT_GT(nonzero, static_cast<int>(got.size() / 2)) << type_name(c.type);  // a real signal, not zeros
  }
}

// Importance-weighted relative RMS error of `back` against the reference's weights.
double weighted_error(const GgmlReference& r, const std::vector<float>& back) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < back.size(); i++) {
    const double w = r.importance[i % static_cast<size_t>(r.cols)], e = back[i] - r.x[i];
    err += w * e * e, norm += w * r.x[i] * r.x[i];
  }
  return std::sqrt(err / norm);
}

TEST(IqFormats, OurQuantizerIsAsGoodAsGgmls) {
  // The same weights and importance row ggml quantized: our bytes decode
  // to an importance-weighted error no worse than ggml's own.
  const GgmlReference r = read_reference();
  for (const GgmlCase& c : r.cases) {
    const size_t rb = row_bytes(c.type, r.cols);
    std::vector<uint8_t> q(rb * static_cast<size_t>(r.rows));
    std::vector<float> back(r.x.size());
    for (int64_t row = 0; row < r.rows; row++) {
      quantize_row(c.type, r.x.data() + row * r.cols, q.data() + row * rb, r.cols, r.importance.data());
      dequantize_row(c.type, q.data() + row * rb, back.data() + row * r.cols, r.cols);
    }
    const double ours = weighted_error(r, back), ggml = weighted_error(r, c.dequantized);
    std::printf("%-8s weighted rel. error: ours %.4f, ggml %.4f\n", std::string(type_name(c.type)).c_str(), ours, ggml);
    EXPECT_LE(ours, ggml) << type_name(c.type);
  }
}

TEST(IqFormats, ScalarDotEqualsGgmlGenericBitForBit) {
  const GgmlReference r = read_reference();
  const void* xs[1] = {r.activation.data()};
  for (const GgmlCase& c : r.cases) {
    const QTypeDots* d = scalar_qdots().find(c.type);
    ASSERT_NE(d, nullptr) << type_name(c.type);
    const size_t rb = row_bytes(c.type, r.cols);
    for (int64_t row = 0; row < r.rows; row++) {
      float got;
      d->one(c.blocks.data() + row * rb, xs, r.cols, &got);
      EXPECT_EQ(got, c.generic[static_cast<size_t>(row)]) << type_name(c.type) << " row " << row;
      // ggml's AVX kernel sums in another order: close, not equal.
      EXPECT_NEAR(got, c.native[static_cast<size_t>(row)], 1e-5 * std::fabs(c.generic[static_cast<size_t>(row)]) + 1e-6)
          << type_name(c.type) << " row " << row;
    }
  }
}

// Random bytes are valid blocks (every index field is in its grid); only
// the fp16 scale is set, to a small finite value.
std::vector<uint8_t> random_iq_rows(GgmlType type, int64_t rows, int64_t cols, uint32_t seed) {
  std::vector<uint8_t> bytes(row_bytes(type, cols) * static_cast<size_t>(rows));
  std::mt19937 rng(seed);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  const size_t bs = traits(type).type_size;
  for (size_t off = 0; off < bytes.size(); off += bs) {
    const uint16_t h = fp32_to_fp16(scale(rng));
    if (type == GgmlType::IQ1_M) {
      for (int k = 0; k < 4; k++) {  // nibble k of the fp16 scale tops scale word k
        uint8_t& hi = bytes[off + 48 + 2 * k + 1];
        hi = static_cast<uint8_t>((hi & 0x0F) | (((h >> (4 * k)) & 0xF) << 4));
      }
    } else {
      std::memcpy(bytes.data() + off, &h, 2);
    }
  }
  return bytes;
}

TEST(IqFormats, RandomBlocksScalarDotIsTheDequantizedDot) {
  for (GgmlType t : kIqTypes) {
    const int64_t cols = 768;
    const auto w = random_iq_rows(t, 3, cols, 11 + static_cast<uint32_t>(t));
    const auto x = test::random_floats(static_cast<size_t>(cols), 12);
    std::vector<BlockQ8_K> a(static_cast<size_t>(cols / kQK_K));
    quantize_activations(ActFormat::Q8_K, x.data(), a.data(), cols);
    const void* xs[1] = {a.data()};
    std::vector<float> wd(static_cast<size_t>(cols));
    for (int64_t r = 0; r < 3; r++) {
      const uint8_t* row = w.data() + r * row_bytes(t, cols);
      dequantize_row(t, row, wd.data(), cols);
      double want = 0, mag = 0;
      for (int64_t c = 0; c < cols; c++) {
        const double xv = a[static_cast<size_t>(c / kQK_K)].d * a[static_cast<size_t>(c / kQK_K)].qs[c % kQK_K];
        want += wd[c] * xv, mag += std::fabs(wd[c] * xv);
      }
      float got;
      scalar_qdots().find(t)->one(row, xs, cols, &got);
      EXPECT_NEAR(got, want, 1e-5 * mag + 1e-7) << type_name(t) << " row " << r;
    }
  }
}

TEST(IqFormats, SimdTablesEqualScalarOnRandomBlocks) {
  const auto tables = test::simd_qdot_tables();
  if (tables.empty()) GTEST_SKIP() << "no AVX2 on this CPU";
  for (GgmlType t : kIqTypes) {
    for (int64_t blocks : {1, 2, 5}) {
      const int64_t cols = kQK_K * blocks;
      const auto w = random_iq_rows(t, 4, cols, static_cast<uint32_t>(100 * blocks) + static_cast<uint32_t>(t));
      std::vector<std::vector<BlockQ8_K>> acts;
      std::vector<const void*> xs;
      for (int k = 0; k < 16; k++) {
        const auto x = test::random_floats(static_cast<size_t>(cols), static_cast<uint32_t>(k + 1));
        acts.emplace_back(static_cast<size_t>(blocks));
        quantize_activations(ActFormat::Q8_K, x.data(), acts.back().data(), cols);
      }
      for (auto& a : acts) xs.push_back(a.data());
      for (int64_t r = 0; r < 4; r++) {
        const uint8_t* row = w.data() + r * row_bytes(t, cols);
        std::vector<float> want(xs.size());
        for (size_t k = 0; k < xs.size(); k++) scalar_qdots().find(t)->one(row, &xs[k], cols, &want[k]);
        for (const QDotTable* table : tables) {
          const QTypeDots* d = table->find(t);
          ASSERT_NE(d, nullptr) << type_name(t) << " " << table->isa;
          float one;
          d->one(row, xs.data(), cols, &one);
          EXPECT_EQ(one, want[0]) << type_name(t) << " " << table->isa << " blocks " << blocks;
          std::vector<float> many(static_cast<size_t>(table->tokens));
          d->many(row, xs.data(), cols, many.data());
          for (int k = 0; k < table->tokens; k++)
            EXPECT_EQ(many[static_cast<size_t>(k)], want[static_cast<size_t>(k)])
                << type_name(t) << " " << table->isa << " token " << k;
        }
      }
    }
  }
}

TEST(IqFormats, MatmulOnGgmlBlocksIsBatchInvariantAndMatchesGgml) {
  // A matrix of ggml's rows through Matmul (the path a model's projections
  // take): the first token's outputs are ggml's dots to the activation
  // rounding, and a batch gives each token what it gets alone.
  const GgmlReference r = read_reference();
  ThreadPool pool(2);
  Matmul mm;
  const int64_t n = 7;
  const auto x = test::random_floats(static_cast<size_t>(n * r.cols), 3);
  for (const GgmlCase& c : r.cases) {
    const Weight w{"blk.0.ffn_down.weight", c.type, {r.cols, r.rows}, c.blocks.data(), c.blocks.size(), nullptr};
    std::vector<float> batch(static_cast<size_t>(n * r.rows)), one(static_cast<size_t>(r.rows));
    mm.run(pool, w, x.data(), n, batch.data());
    for (int64_t tk = 0; tk < n; tk++) {
      mm.run(pool, w, x.data() + tk * r.cols, 1, one.data());
      for (int64_t row = 0; row < r.rows; row++)
        ASSERT_EQ(batch[static_cast<size_t>(tk * r.rows + row)], one[static_cast<size_t>(row)])
            << type_name(c.type) << " token " << tk;
    }
    for (int64_t row = 0; row < r.rows; row++) {
      double want = 0, mag = 0;
      for (int64_t k = 0; k < r.cols; k++) {
        const double p = double(c.dequantized[static_cast<size_t>(row * r.cols + k)]) * x[static_cast<size_t>(k)];
        want += p, mag += std::fabs(p);
      }
      EXPECT_NEAR(batch[static_cast<size_t>(row)], want, 0.02 * mag) << type_name(c.type) << " row " << row;
    }
  }
}

// Which IQ1-IQ3 types a file holds, by tensor count.
std::map<GgmlType, int> iq_types_in(const std::string& path) {
  std::map<GgmlType, int> n;
  const auto file = GgufFile::open(path);  // kept alive: tensors() refers into it
  for (const auto& t : file.tensors())
    if (is_iq_grid_type(t.type)) n[t.type]++;
  return n;
}

TEST(IqFormats, MixesFromOurImatrixRunLikeTheirWidenedWeights) {
  // llama32 of the compat set: an importance matrix by `kestrel imatrix`,
  // then llama-quantize's IQ mixes by `kestrel quantize` — together every
  // IQ1-IQ3 type. Each file's logits through the IQ kernels (activations
  // rounded to Q8_K, as ggml rounds them) equal those of the same weights
  // widened to F32 up to that rounding (as close as a llama.cpp Q2_K file's
  // are to its own widened weights); and fewer bits land further from the
  // F16 model's logits.
  test::TempDir dir;
  const std::string f16 = test::compat_model("llama32.F16"), im = dir.file("im.gguf");
  const std::string text = std::string(KESTREL_SOURCE_DIR) + "/tests/data/calib-stories.txt";
  const std::string bin = KESTREL_BINARY;
  ASSERT_EQ(std::system((bin + " imatrix -m " + f16 + " -f " + text + " -o " + im + " -c 64 -t 2 > /dev/null 2>&1").c_str()), 0);
  const std::vector<int32_t> prompt = {1000, 17, 301, 52, 9, 640, 88, 123, 5, 71};
  auto logits = [&](const std::string& path) {
    LoadOptions o;
    o.model_path = path;
    o.n_threads = 2;
    o.n_ctx = 64;
    LoadedModel e = LoadedModel::load(o);
    return test::all_logits(e, prompt, 4);
  };
  auto rel_rms = [](const std::vector<float>& a, const std::vector<float>& b) {
    double d = 0, n = 0;
    for (size_t i = 0; i < a.size(); i++) d += (a[i] - b[i]) * (a[i] - b[i]), n += b[i] * b[i];
    return std::sqrt(d / n);
  };
  // Greedy continuations may part ways; compare the prompt's rows, which every run computes from the same tokens.
  const size_t n_vocab = static_cast<size_t>(*GgufFile::open(f16).find_tensor("token_embd.weight")->ne.rbegin());
  auto prompt_rows = [&](std::vector<float> v) {
    v.resize(prompt.size() * n_vocab);
    return v;
  };
  const auto base = prompt_rows(logits(f16));
  // The yardstick for activation rounding: llama-quantize's Q2_K file, whose
  // k-quant kernels round activations to Q8_K too, against its widened weights.
  const std::string q2k = test::compat_model("llama32.Q2_K");
  const double yardstick =
      rel_rms(prompt_rows(logits(q2k)), prompt_rows(logits(test::widen_to_f32(q2k, dir.file("q2k.f32.gguf")))));
  std::printf("Q2_K     logits vs its own weights in F32: %.4f\n", yardstick);
  std::set<GgmlType> seen;
  double previous = 0;
  for (const char* mix : {"IQ3_S", "IQ3_XXS", "IQ2_M", "IQ2_XS", "IQ2_XXS", "IQ1_M", "IQ1_S"}) {
    const std::string out = dir.file(std::string(mix) + ".gguf");
    ASSERT_EQ(std::system((bin + " quantize " + f16 + " " + out + " --mix " + mix + " --imatrix " + im +
                           " -t 2 > /dev/null 2>&1").c_str()), 0) << mix;
    const auto types = iq_types_in(out);
    ASSERT_FALSE(types.empty()) << mix;
    for (const auto& [t, n] : types) seen.insert(t);
    const auto got = prompt_rows(logits(out));
    const auto wide = prompt_rows(logits(test::widen_to_f32(out, dir.file(std::string(mix) + ".f32.gguf"))));
    const double vs_wide = rel_rms(got, wide), vs_f16 = rel_rms(got, base);
    std::printf("%-8s logits vs its own weights in F32: %.4f, vs the F16 model: %.4f\n", mix, vs_wide, vs_f16);
    EXPECT_LT(vs_wide, 1.5 * yardstick) << mix;
    EXPECT_GT(vs_f16, 5 * vs_wide) << mix;  // the weights' rounding dominates the activations'
    EXPECT_GT(vs_f16, 0.5 * previous) << mix;
    previous = vs_f16;
  }
  EXPECT_EQ(seen.size(), std::size(kIqTypes));
}

}  // namespace
}  // namespace kestrel

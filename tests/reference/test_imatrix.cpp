// Importance matrices: what `kestrel imatrix` collects equals the mean
// square of each input channel computed independently here (layer 0's
// attention input: the embedding rows RMS-normed by hand); the file is
// llama.cpp's GGUF imatrix layout and reads back; bad files are refused by
// name; and the weighted fits do what they are for — lower the
// importance-weighted error than the unweighted ones, type by type.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "formats/block_formats.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "quant/imatrix.h"
#include "quant/quant_mix.h"
#include "test_support.h"

namespace kestrel {
namespace {

int run(const std::string& args) { return std::system((std::string(KESTREL_BINARY) + " " + args + " > /dev/null 2>&1").c_str()); }

TEST(Imatrix, CollectsTheMeanSquareOfEachInputChannel) {
  test::TempDir dir;
  const std::string model = test::shared("models/stories260K.gguf"), text = test::shared("eval/stories.txt");
  const int64_t ctx = 128, chunks = 3;
  ASSERT_EQ(run("imatrix -m " + model + " -f " + text + " -o " + dir.file("im.gguf") + " -c 128 --chunks 3 -t 2"), 0);
  const ImportanceMatrix m = read_imatrix(dir.file("im.gguf"));
  EXPECT_EQ(m.chunk_count, chunks);
  EXPECT_EQ(m.chunk_size, ctx);
  EXPECT_EQ(m.datasets, std::vector<std::string>{"stories.txt"});
  EXPECT_FALSE(m.entries.count("output.weight"));  // as llama-imatrix without --process-output
  const GgufFile f = GgufFile::open(model);
  int64_t n_layer = *f.get_int("llama.block_count");
  EXPECT_EQ(m.entries.size(), static_cast<size_t>(7 * n_layer));  // q, k, v, output, gate, up, down per layer

  // Layer 0's q/k/v read rmsnorm(embedding) * attn_norm: recompute it.
  LoadedModel e = LoadedModel::load(test::shared_engine("models/stories260K.gguf"));
  const std::vector<int32_t> tokens = e.tokenizer->encode(test::read_text(text), true, false);
  const auto* embd = f.find_tensor("token_embd.weight");
  const auto* norm = reinterpret_cast<const float*>(f.find_tensor("blk.0.attn_norm.weight")->data);
  const int64_t dim = embd->ne[0];
  const double eps = *f.get_double("llama.attention.layer_norm_rms_epsilon");
  std::vector<double> want(static_cast<size_t>(dim), 0.0);
  std::vector<float> x(static_cast<size_t>(dim));
  for (int64_t c = 0; c < chunks; c++)
    for (int64_t i = 0; i < ctx; i++) {
      const int32_t tok = i == 0 ? e.tokenizer->vocab().bos : tokens[c * ctx + i];
      dequantize_row(embd->type, embd->data + tok * row_bytes(embd->type, dim), x.data(), dim);
      double ss = 0;
      for (float v : x) ss += double(v) * v;
      const double inv = 1 / std::sqrt(ss / dim + eps);
      for (int64_t j = 0; j < dim; j++) want[j] += std::pow(x[j] * inv * norm[j], 2);
    }
  for (const char* w : {"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight"}) {
    const ImportanceEntry& got = m.entries.at(w);
    ASSERT_EQ(got.n_per_row, dim);
    ASSERT_EQ(got.n_mat, 1);
    EXPECT_EQ(got.counts[0], chunks * ctx);
    for (int64_t j = 0; j < dim; j++) EXPECT_NEAR(got.in_sum2[j], want[j], 1e-4 * want[j] + 1e-6) << w << " column " << j;
    const auto imp = m.importance(w);
    EXPECT_NEAR(imp[5], want[5] / (chunks * ctx), 1e-4 * imp[5]);
  }
  // The FFN down projection's input is 172 wide (the hidden size).
  EXPECT_EQ(m.entries.at("blk.0.ffn_down.weight").n_per_row, 172);

  // quantize uses it, and says which matrices it has no data for (the embedding and the head here).
  const std::string cmd = std::string(KESTREL_BINARY) + " quantize " + model + " " + dir.file("q.gguf") +
                          " --type q4_0 --imatrix " + dir.file("im.gguf") + " 2> " + dir.file("err.txt");
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const std::string err = test::read_text(dir.file("err.txt"));
  EXPECT_NE(err.find("importance matrix"), std::string::npos) << err;
  EXPECT_NE(err.find("no data for output.weight: rounded without importance"), std::string::npos) << err;
  EXPECT_EQ(err.find("no data for blk.0.attn_q.weight"), std::string::npos) << err;
}

TEST(Imatrix, FileLayoutRoundTripAndRefusals) {
  test::TempDir dir;
  ImportanceMatrix m;
  m.datasets = {"a.txt", "b.txt"};
  m.chunk_count = 7;
  m.chunk_size = 64;
  m.entries["blk.0.ffn_up_exps.weight"] = {4, 2, {1, 2, 3, 4, 5, 6, 7, 8}, {10, 0}};
  write_imatrix(m, dir.file("m.gguf"));
  const GgufFile f = GgufFile::open(dir.file("m.gguf"));
  EXPECT_EQ(f.get_string("general.type"), "imatrix");
  const auto* sums = f.find_tensor("blk.0.ffn_up_exps.weight.in_sum2");
  ASSERT_NE(sums, nullptr);
  EXPECT_EQ(sums->ne, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(f.find_tensor("blk.0.ffn_up_exps.weight.counts")->ne, (std::vector<int64_t>{1, 2}));
  const ImportanceMatrix r = read_imatrix(dir.file("m.gguf"));
  EXPECT_EQ(r.datasets, m.datasets);
  EXPECT_EQ(r.importance("blk.0.ffn_up_exps.weight", 0), (std::vector<float>{0.1f, 0.2f, 0.3f, 0.4f}));
  EXPECT_TRUE(r.importance("blk.0.ffn_up_exps.weight", 1).empty());  // an expert no token reached
  EXPECT_TRUE(r.importance("blk.9.attn_q.weight").empty());

  auto refused = [&](const std::string& path, const std::string& what) {
    try {
      read_imatrix(path);
      ADD_FAILURE() << path << " read";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  refused(test::shared("models/stories260K.gguf"), "not an importance matrix");
  GgufWriter w;
  w.set_str("general.type", "imatrix");
  const float v[4] = {1, 2, 3, 4};
  w.add_tensor_bytes("blk.0.attn_q.weight.in_sum2", GgmlType::F32, {2, 2}, v);
  w.add_tensor_bytes("blk.0.attn_q.weight.counts", GgmlType::F32, {1, 1}, v);
  w.write_file(dir.file("bad.gguf"));
  refused(dir.file("bad.gguf"), "2 matrices of sums but 1 counts");
}

TEST(Imatrix, WeightedFitsLowerTheWeightedError) {
  const int64_t cols = 512, rows = 16;
  const auto x = test::random_floats(static_cast<size_t>(cols * rows), 21);
  // A skewed importance: a few channels matter 100x more, as outlier channels do in real models.
  std::vector<float> imp(static_cast<size_t>(cols));
  for (int64_t c = 0; c < cols; c++) imp[c] = c % 37 == 0 ? 100.0f : 1.0f;
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q2_K, GgmlType::Q3_K,
                     GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS,
                     GgmlType::IQ3_S, GgmlType::IQ3_XXS, GgmlType::IQ2_S, GgmlType::IQ2_XS, GgmlType::IQ2_XXS,
                     GgmlType::IQ1_M, GgmlType::IQ1_S}) {
    ASSERT_TRUE(uses_importance(t));
    std::vector<uint8_t> q(row_bytes(t, cols));
    std::vector<float> back(static_cast<size_t>(cols));
    double plain = 0, weighted = 0;
    for (int64_t r = 0; r < rows; r++) {
      const float* row = x.data() + r * cols;
      for (int pass = 0; pass < 2; pass++) {
        quantize_row(t, row, q.data(), cols, pass ? imp.data() : nullptr);
        dequantize_row(t, q.data(), back.data(), cols);
        double e = 0;
        for (int64_t c = 0; c < cols; c++) e += imp[c] * (back[c] - row[c]) * (back[c] - row[c]);
        (pass ? weighted : plain) += e;
      }
    }
    EXPECT_LT(weighted, 0.9 * plain) << type_name(t) << ": weighted " << weighted << ", plain " << plain;
  }
}

TEST(Imatrix, MixesThatNeedOneSaySo) {
  const GgufFile src = GgufFile::open(test::shared("reference/compat/models/llama32.F16.gguf"));
  try {
    plan_quant_mix(src, *find_quant_mix("Q2_K_S"), {});
    FAIL() << "Q2_K_S planned without an importance matrix";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("--imatrix"), std::string::npos) << e.what();
  }
  QuantMixOptions with;
  with.has_imatrix = true;
  EXPECT_EQ(plan_quant_mix(src, *find_quant_mix("Q2_K_S"), with).at("blk.0.attn_q.weight"), GgmlType::Q2_K);
}

}  // namespace
}  // namespace kestrel

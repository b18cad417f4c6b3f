// k-quant blocks (Q4_K, Q5_K, Q6_K) read as ggml writes them: the reference
// model quantized by llama.cpp to each k-quant dequantizes to within the
// format's rounding error of the same model quantized to Q8_0 — 4, 5 and 6
// bits give about 7%, 3.6% and 1.9% relative RMS error; a misread layout
// (a swapped nibble, a wrong scale) gives errors of order one.
#include <gtest/gtest.h>

#include <cmath>

#include "formats/block_formats.h"
#include "formats/kquant_formats.h"
#include "gguf/gguf.h"
#include "test_support.h"

namespace kestrel {
namespace {

TEST(KQuant, DequantizedWeightsAgreeWithTheQ8_0CopyOfTheSameModel) {
  const GgufFile q8 = GgufFile::open(test::shared("reference/llama.cpp/llama-q.q8_0.gguf"));
  const std::pair<const char*, double> formats[] = {{"q4_k", 0.09}, {"q5_k", 0.045}, {"q6_k", 0.024}};
  for (const auto& [name, bound] : formats) {
    const GgufFile k = GgufFile::open(test::shared(std::string("reference/llama.cpp/llama-q.") + name + ".gguf"));
    for (const auto& t : k.tensors()) {
      if (t.ne.size() < 2) continue;
      const GgufTensorInfo* ref = q8.find_tensor(t.name);
      ASSERT_NE(ref, nullptr) << t.name;
      const int64_t n = t.n_elements();
      std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
      dequantize_row(ref->type, ref->data, a.data(), n);
      dequantize_row(t.type, t.data, b.data(), n);
      double err = 0, norm = 0;
      for (int64_t i = 0; i < n; i++) err += (a[i] - b[i]) * (a[i] - b[i]), norm += a[i] * a[i];
      const double rel = std::sqrt(err / norm);
      EXPECT_LT(rel, bound) << name << " " << t.name;
      EXPECT_GT(rel, bound / 8) << name << " " << t.name << ": suspiciously exact";
    }
  }
}

TEST(KQuant, HandMadeBlocksDecodeAsTheFormulaSays) {
  // Q4_K: sub-block 0 has scale 2, min 1 (6-bit packed); d = 0.5, dmin = 0.25.
  BlockQ4_K q4{};
  q4.d = 0x3800;        // 0.5 in fp16
  q4.dmin = 0x3400;     // 0.25
  q4.scales[0] = 2;     // sub-block 0 scale
  q4.scales[4] = 1;     // sub-block 0 min
  q4.scales[8] = 0x35;  // sub-block 4: scale 5 (low nibble), min 3 (high nibble)
  q4.qs[0] = 0x97;      // element 0: 7, element 32: 9 (sub-block 1: scale 0, min 0)
  q4.qs[64] = 0x03;     // element 128 (sub-block 4): 3
  float y[256];
  dequantize_row_q4_K(&q4, y, 256);
  EXPECT_FLOAT_EQ(y[0], 0.5f * 2 * 7 - 0.25f * 1);
  EXPECT_FLOAT_EQ(y[32], 0.0f);
  EXPECT_FLOAT_EQ(y[128], 0.5f * 5 * 3 - 0.25f * 3);
  // Q6_K: element 0 = d * scale0 * (q - 32) with q = low 4 bits of ql[0] | 2 bits of qh[0].
  BlockQ6_K q6{};
  q6.d = 0x3C00;  // 1.0
  q6.scales[0] = 3;
  q6.ql[0] = 0x05;
  q6.qh[0] = 0x02;  // high bits 2 -> q = 5 | 32 = 37
  dequantize_row_q6_K(&q6, y, 256);
  EXPECT_FLOAT_EQ(y[0], 3.0f * (37 - 32));
  EXPECT_FLOAT_EQ(y[1], 3.0f * (0 - 32));
}

// Relative RMS error of b against a.
double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < a.size(); i++) err += (a[i] - b[i]) * (a[i] - b[i]), norm += a[i] * a[i];
  return std::sqrt(err / norm);
}

// Our k-quant writer against llama.cpp's: both quantize the same weights (the
// reference model's Q8_0 copy stands in for its float weights; its own error
// is ~0.4%, small beside 4-6 bit errors). Ours must be about as accurate as
// llama.cpp's files (within 5%), and what we write must read back through the
// decoder already checked against llama.cpp's blocks.
TEST(KQuant, WriterIsAsAccurateAsLlamaCppsQuantizer) {
  const GgufFile q8 = GgufFile::open(test::shared("reference/llama.cpp/llama-q.q8_0.gguf"));
  const std::pair<const char*, GgmlType> formats[] = {
      {"q4_k", GgmlType::Q4_K}, {"q5_k", GgmlType::Q5_K}, {"q6_k", GgmlType::Q6_K}};
  for (const auto& [name, type] : formats) {
    const GgufFile theirs = GgufFile::open(test::shared(std::string("reference/llama.cpp/llama-q.") + name + ".gguf"));
    double ours_total = 0, theirs_total = 0;
    int count = 0;
    for (const auto& t : theirs.tensors()) {
      if (t.ne.size() < 2) continue;
      const GgufTensorInfo* ref = q8.find_tensor(t.name);
      ASSERT_NE(ref, nullptr) << t.name;
      const int64_t n = t.n_elements();
      std::vector<float> x(static_cast<size_t>(n)), their_y(x.size()), our_y(x.size());
      dequantize_row(ref->type, ref->data, x.data(), n);
      dequantize_row(t.type, t.data, their_y.data(), n);
      std::vector<uint8_t> bytes(row_bytes(type, n));
      quantize_row(type, x.data(), bytes.data(), n);
      dequantize_row(type, bytes.data(), our_y.data(), n);
      const double ours = relative_error(x, our_y), theirs_err = relative_error(x, their_y);
      EXPECT_LT(ours, theirs_err * 1.05) << name << " " << t.name;
      EXPECT_GT(ours, theirs_err * 0.5) << name << " " << t.name << ": suspiciously exact";
      ours_total += ours;
      theirs_total += theirs_err;
      count++;
    }
    std::printf("%s: mean relative error ours %.4f, llama.cpp %.4f\n", name, ours_total / count, theirs_total / count);
  }
}

TEST(KQuant, WriterHandlesZeroConstantAndSignedBlocks) {
  std::vector<float> x(512, 0.0f);
  for (int i = 256; i < 512; i++) x[i] = i % 2 ? -3.0f : 1.5f;  // second block: two values, mixed sign
  for (const GgmlType type : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    std::vector<uint8_t> bytes(row_bytes(type, 512));
    quantize_row(type, x.data(), bytes.data(), 512);
    std::vector<float> y(512);
    dequantize_row(type, bytes.data(), y.data(), 512);
    for (int i = 0; i < 256; i++) ASSERT_EQ(y[i], 0.0f) << type_name(type) << " " << i;
    // Two distinct values sit on the grid: each comes back within fp16 scale rounding.
    for (int i = 256; i < 512; i++) ASSERT_NEAR(y[i], x[i], 0.02) << type_name(type) << " " << i;
  }
}

}  // namespace
}  // namespace kestrel

// k-quant blocks (Q4_K, Q5_K, Q6_K) read as ggml writes them: the reference
// model quantized by llama.cpp to each k-quant dequantizes to within the
// format's rounding error of the same model quantized to Q8_0 — 4, 5 and 6
// bits give about 7%, 3.6% and 1.9% relative RMS error; a misread layout
// (a swapped nibble, a wrong scale) gives errors of order one.
#include <gtest/gtest.h>

#include <cmath>

#include "core/block_formats.h"
#include "core/kquant_formats.h"
#include "model/gguf.h"
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

}  // namespace
}  // namespace kestrel

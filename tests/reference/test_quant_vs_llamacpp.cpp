// Every quantized tensor of the compat reference set (written by
// llama-quantize from the float32 source) decodes close to the same tensor
// of the set's F16 file (the same source rounded to fp16): a wrong block
// layout decodes to noise. And our quantizer, given the F16 tensor, loses
// no more than llama-quantize did, type by type.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "formats/block_formats.h"
#include "gguf/gguf.h"
#include "test_support.h"

namespace kestrel {
namespace {

std::vector<float> decode(const GgufTensorInfo& t) {
  std::vector<float> v(static_cast<size_t>(t.n_elements()));
  const int64_t cols = t.ne[0], rows = t.n_elements() / cols;
  const size_t rb = row_bytes(t.type, cols);
  for (int64_t r = 0; r < rows; r++) dequantize_row(t.type, t.data + r * rb, v.data() + r * cols, cols);
  return v;
}

double relative_rms(const std::vector<float>& a, const std::vector<float>& ref) {
  double e = 0, s = 0;
  for (size_t i = 0; i < a.size(); i++) e += (a[i] - ref[i]) * (a[i] - ref[i]), s += ref[i] * ref[i];
  return std::sqrt(e / s);
}

struct Seen {
  double theirs = 0, ours = 0;
  int tensors = 0;
};

TEST(QuantVsLlamaCpp, DecodeAndRequantizeEveryMix) {
  std::map<GgmlType, Seen> by_type;
  for (const char* family : {"llama32", "qwen25"}) {
    const GgufFile f16 = GgufFile::open(test::shared(std::string("reference/compat/models/") + family + ".F16.gguf"));
    for (const char* mix : {"Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q3_K_M", "Q2_K", "Q5_0", "Q5_1", "Q4_0", "Q4_1",
                            "IQ4_NL", "IQ4_XS"}) {
      const std::string path = test::shared(std::string("reference/compat/models/") + family + "." + mix + ".gguf");
      if (!std::filesystem::exists(path)) continue;  // the set leaves some qwen25 mixes out
      const GgufFile q = GgufFile::open(path);
      for (const auto& t : q.tensors()) {
        if (t.type == GgmlType::F32 || t.type == GgmlType::F16) continue;
        const GgufTensorInfo* src = f16.find_tensor(t.name);
        ASSERT_NE(src, nullptr) << t.name;
        const std::vector<float> ref = decode(*src), theirs = decode(t);
        const double e_theirs = relative_rms(theirs, ref);
        // 2 bits per weight loses about a third; a scrambled layout loses everything (~1.4).
        EXPECT_LT(e_theirs, 0.45) << family << "." << mix << " " << t.name << " (" << type_name(t.type) << ")";
        std::vector<uint8_t> bytes(t.nbytes);
        const int64_t cols = t.ne[0], rows = t.n_elements() / cols;
        const size_t rb = row_bytes(t.type, cols);
        for (int64_t r = 0; r < rows; r++) quantize_row(t.type, ref.data() + r * cols, bytes.data() + r * rb, cols);
        GgufTensorInfo ours = t;
        ours.data = bytes.data();
        const double e_ours = relative_rms(decode(ours), ref);
        Seen& s = by_type[t.type];
        s.theirs += e_theirs, s.ours += e_ours, s.tensors++;
      }
    }
  }
  for (GgmlType t : {GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q2_K, GgmlType::Q3_K,
                     GgmlType::IQ4_NL, GgmlType::IQ4_XS})
    EXPECT_GT(by_type[t].tensors, 0) << type_name(t);
  for (const auto& [type, s] : by_type) {
    const double theirs = s.theirs / s.tensors, ours = s.ours / s.tensors;
    std::printf("%-7s %3d tensors  relative RMS error: llama-quantize %.4f, ours %.4f\n",
                std::string(type_name(type)).c_str(), s.tensors, theirs, ours);
    // Without an importance matrix llama-quantize's searches are thorough; ours may lose a little more, not much.
    EXPECT_LT(ours, 1.15 * theirs + 1e-4) << type_name(type);
  }
}

}  // namespace
}  // namespace kestrel

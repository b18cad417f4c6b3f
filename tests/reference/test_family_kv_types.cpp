// Every KV-cache type on every compat family (Gemma's sliding-window group
// included, Qwen3's 128-wide heads, Phi-3's 64): the logits of a prompt and
// its greedy continuation against the float32 cache's, within each type's
// bound (about twice what each measured on its worst family; the compat
// Gemma 2 has q/k weights scaled x6 so that its soft-cap acts, which makes
// its attention sharp: five times the bound), and in the types' order of
// precision (f16 < q8_0 < fp8 < q4).
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "runtime/generator.h"
#include "test_support.h"

namespace kestrel {
namespace {

std::vector<float> logits_with(const std::string& cell, KvType kv) {
  LoadOptions o = test::shared_engine("reference/compat/models/" + cell + ".gguf", 128);
  o.kv_type_k = o.kv_type_v = kv;
  o.kv_block_size = 8;
  LoadedModel e = LoadedModel::load(o);
  const auto ref = test::read_json(test::shared("reference/compat/expected.json"))["cells"][cell]["runs"][0];
  std::vector<int32_t> prompt = ref["prompt"].get<std::vector<int32_t>>();
  for (int32_t id : ref["ids"].get<std::vector<int32_t>>()) prompt.push_back(id);  // 36 tokens
  return test::all_logits(e, prompt, 1);
}

TEST(FamilyKvTypes, EveryTypeStaysNearTheFloat32Cache) {
  struct Bound {
    KvType type;
    double mean;
  };
  const Bound bounds[] = {{KvType::F16, 0.004}, {KvType::BF16, 0.015}, {KvType::Q8_0, 0.11}, {KvType::FP8, 0.25},
                          {KvType::Q4, 0.8}};
  for (const char* cell : {"llama32.F16", "qwen3.F16", "qwen3moe.F16", "mixtral.F16", "phi3.F16", "gemma2.F16",
                           "gemma3.F16", "r1qwen.F16"}) {
    const auto base = logits_with(cell, KvType::F32);
    const double sharp = std::string(cell) == "gemma2.F16" ? 5.0 : 1.0;
    std::map<KvType, double> means;
    for (const auto& b : bounds) {
      const auto got = logits_with(cell, b.type);
      ASSERT_EQ(got.size(), base.size());
      double sum = 0;
      for (size_t i = 0; i < got.size(); i++) {
        ASSERT_TRUE(std::isfinite(got[i])) << cell << " " << kv_type_name(b.type);
        sum += std::fabs(got[i] - base[i]);
      }
      const double mean = sum / static_cast<double>(got.size());
      RecordProperty(std::string(cell) + "_" + kv_type_name(b.type), std::to_string(mean));
      EXPECT_LT(mean, b.mean * sharp) << cell << " " << kv_type_name(b.type);
      if (b.type == KvType::F16) {
        EXPECT_GT(mean, 0.0) << cell << ": the cache type made no difference";
      }
      means[b.type] = mean;
    }
    EXPECT_LT(means[KvType::F16], means[KvType::Q8_0]) << cell;
    EXPECT_LT(means[KvType::Q8_0], means[KvType::FP8]) << cell;
    EXPECT_LT(means[KvType::FP8], means[KvType::Q4]) << cell;
  }
}

}  // namespace
}  // namespace kestrel

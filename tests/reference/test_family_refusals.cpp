// The families added for issue 39 (gpt-oss, mistral3, glm4moe, llama4, gemma4): what an architecture does not compute
// is refused by name at load, not run with other math.
#include <gmock/gmock.h>

#include <functional>

#include <cstring>

#include "test_support.h"

namespace kestrel {
namespace {

using ::testing::HasSubstr;

TEST(FamilyRefusals, TheNewFamiliesRefuseWhatTheyDoNotComputeByName) {
  test::TempDir dir;
  struct Case {
    const char* arch;
    const char* what;
    std::function<void(GgufWriter&)> edit;
    const char* named;
  };
  const std::vector<Case> cases = {
      {"gpt-oss", "softmax routing", [](GgufWriter& w) { w.set_u32("gpt-oss.expert_gating_func", 1); },
       "gpt-oss.expert_gating_func"},
      {"gpt-oss", "an unknown key", [](GgufWriter& w) { w.set_f32("gpt-oss.attention.scale", 0.5f); },
       "gpt-oss.attention.scale"},
      {"mistral3", "a negative YaRN log multiplier",
       [](GgufWriter& w) { w.set_f32("mistral3.rope.scaling.yarn_log_multiplier", -1.0f); },
       "mistral3.rope.scaling.yarn_log_multiplier"},
      {"glm4moe", "sqrt-softplus routing", [](GgufWriter& w) { w.set_u32("glm4moe.expert_gating_func", 4); },
       "glm4moe.expert_gating_func"},
      {"glm4moe", "GLM-4.5V's M-RoPE sections",
       [](GgufWriter& w) {
         std::vector<GgufValue> v;
         for (uint32_t x : {8u, 4u, 4u, 0u}) v.push_back(GgufValue::u32(x));
         w.set("glm4moe.rope.dimension_sections", GgufValue::array(GgufValueType::UINT32, v));
       },
       "glm4moe.rope.dimension_sections"},
      {"llama4", "no chunked attention", [](GgufWriter& w) { w.set_u32("llama4.attention.sliding_window", 0); },
       "llama4.attention.sliding_window"},
      {"llama4", "attention sinks (gpt-oss's, not Llama 4's)",
       [](GgufWriter& w) {
         w.add_tensor("blk.0.attn_sinks.weight", GgmlType::F32, {4}, [](uint8_t* d, size_t n) { std::memset(d, 0, n); });
       },
       "blk.0.attn_sinks.weight"},
      {"gemma4", "KV heads differing among the sliding layers",
       [](GgufWriter& w) {
         std::vector<GgufValue> v;
         for (int l = 0; l < 12; l++) v.push_back(GgufValue::u32(l == 0 ? 1 : l % 3 == 2 ? 1 : 2));
         w.set("gemma4.attention.head_count_kv", GgufValue::array(GgufValueType::UINT32, v));
       },
       "gemma4.attention.head_count_kv"},
      {"gemma4", "shared layers whose source would be a layer of the other kind",
       [](GgufWriter& w) { w.set_u32("gemma4.attention.shared_kv_layers", 2); }, "gemma4.attention.shared_kv_layers"},
      {"gemma4", "Gemma 3's period instead of one flag per layer",
       [](GgufWriter& w) { w.set_u32("gemma4.attention.sliding_window_pattern", 3); },
       "gemma4.attention.sliding_window_pattern"},
      {"gemma4", "an unknown key", [](GgufWriter& w) { w.set_f32("gemma4.attention.scale", 0.5f); },
       "gemma4.attention.scale"},
  };
  for (const Case& c : cases)
    EXPECT_THAT(test::load_error_of_edited_synth(c.arch, c.edit, dir.file("bad.gguf")), HasSubstr(c.named))
        << c.arch << ": " << c.what;
}

}  // namespace
}  // namespace kestrel

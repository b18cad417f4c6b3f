// Qwen3-MoE (Qwen3-30B-A3B, 235B-A22B): Qwen3's attention in the Llama
// layer (llama_layer.h) with routed experts (softmax over the router, top-k,
// weights renormalised) and no shared expert; its feed_forward_length
// describes no tensor.
#include "model/arch/families.h"
#include "model/arch/llama_layer.h"
#include "model/hparams_common.h"

namespace kestrel {
namespace {

constexpr LayerRecipe kRecipe{.qk_norm = true};

ModelConfig read(HparamReader& h, const ModelOptions&) {
  ModelConfig c = read_decoder_basics(h, RopeStyle::NeoX);
  read_qwen_experts(h, c, /*normalize=*/true);
  return c;
}

std::vector<SynthPreset> presets() {
  return {
      {"tiny", synth_shape("qwen3moe", 64, 2, 4, 2, 192, 512, 512,
                           SynthDecoder{.head_dim = 32, .rope_base = 1e6f, .experts = 8, .experts_used = 2, .ffn_expert = 32})},
      {"30b-a3b",  // Qwen3-30B-A3B
       synth_shape("qwen3moe", 2048, 48, 32, 4, 6144, 151936, 40960,
                   SynthDecoder{.head_dim = 128, .rope_base = 1e6f, .experts = 128, .experts_used = 8, .ffn_expert = 768})},
  };
}

}  // namespace

const Family& qwen3moe_family() {
  static const Family f{"qwen3moe", "Qwen3-30B-A3B, Qwen3-235B-A22B", kRecipe, read, make_llama<kRecipe>, synth_qwen<kRecipe>, presets};
  return f;
}

}  // namespace kestrel

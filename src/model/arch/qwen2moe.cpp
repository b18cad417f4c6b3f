// Qwen2-MoE (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B): Qwen2's attention in the
// Llama layer (llama_layer.h) with routed experts (softmax over the router,
// top-k, weights not renormalised) and a shared expert whose output each
// token scales by sigmoid(x . ffn_gate_inp_shexp).
#include "model/arch/families.h"
#include "model/arch/llama_layer.h"
#include "model/hparams_common.h"

namespace kestrel {
namespace {

constexpr LayerRecipe kRecipe{.qkv_bias = true};

ModelConfig read(HparamReader& h, const ModelOptions&) {
  ModelConfig c = read_decoder_basics(h, RopeStyle::NeoX);
  read_qwen_experts(h, c, /*normalize=*/false);
  c.moe.n_ff_shared = h.int_or("expert_shared_feed_forward_length", c.n_ff);
  c.moe.shared_gate = true;
  return c;
}

std::vector<SynthPreset> presets() {
  return {
      {"tiny", synth_shape("qwen2moe", 64, 2, 4, 4, 192, 512, 512,
                           SynthDecoder{.rope_base = 1e6f, .experts = 4, .experts_used = 2, .ffn_expert = 32, .ffn_shared = 64})},
      {"a2.7b",  // Qwen1.5-MoE-A2.7B
       synth_shape("qwen2moe", 2048, 24, 16, 16, 5632, 151936, 8192,
                   SynthDecoder{.rope_base = 1e6f, .experts = 60, .experts_used = 4, .ffn_expert = 1408, .ffn_shared = 5632})},
  };
}

}  // namespace

const Family& qwen2moe_family() {
  static const Family f{"qwen2moe", "Qwen1.5-MoE, Qwen2-57B-A14B", kRecipe, read, make_llama<kRecipe>, synth_qwen<kRecipe>, presets};
  return f;
}

}  // namespace kestrel

// Qwen2 / Qwen2.5 and the DeepSeek-R1-Distill-Qwen models: the Llama layer
// (llama_layer.h) with q/k/v biases and RoPE on halves (NeoX).
#include "model/arch/families.h"
#include "model/arch/llama_layer.h"
#include "model/hparams_common.h"

namespace kestrel {
namespace {

constexpr LayerRecipe kRecipe{.qkv_bias = true};

ModelConfig read(HparamReader& h, const ModelOptions&) { return read_decoder_basics(h, RopeStyle::NeoX); }

std::vector<SynthPreset> presets() {
  return {
      {"tiny", synth_shape("qwen2", 64, 2, 4, 2, 192, 512, 512, SynthDecoder{.rope_base = 1e6f})},
      {"0.5b", synth_shape("qwen2", 896, 24, 14, 2, 4864, 151936, 32768,
                           SynthDecoder{.tied = true, .rope_base = 1e6f})},           // Qwen2.5-0.5B
      {"r1-1.5b", synth_shape("qwen2", 1536, 28, 12, 2, 8960, 151936, 131072)},      // DeepSeek-R1-Distill-Qwen-1.5B
      {"7b", synth_shape("qwen2", 3584, 28, 28, 4, 18944, 152064, 32768, SynthDecoder{.rope_base = 1e6f})},  // Qwen2.5-7B
  };
}

}  // namespace

const Family& qwen2_family() {
  static const Family f{"qwen2", "Qwen2, Qwen2.5, DeepSeek-R1-Distill-Qwen", kRecipe, read, make_llama<kRecipe>,
                        synth_qwen<kRecipe>, presets, /*awq_folds=*/true};
  return f;
}

}  // namespace kestrel

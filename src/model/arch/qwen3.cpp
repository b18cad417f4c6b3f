// Qwen3: the Llama layer (llama_layer.h) with an RMSNorm of each query and
// key head (attn_q_norm / attn_k_norm) before RoPE (NeoX), no biases; the
// head size comes from key_length and may differ from n_embd / n_head
// (Qwen3-0.6B: 16 heads of 128 on a 1024 stream).
#include "model/arch/families.h"
#include "model/arch/llama_layer.h"
#include "model/hparams_common.h"

namespace kestrel {
namespace {

constexpr LayerRecipe kRecipe{.qk_norm = true};

ModelConfig read(HparamReader& h, const ModelOptions&) { return read_decoder_basics(h, RopeStyle::NeoX); }

std::vector<SynthPreset> presets() {
  const SynthDecoder d128{.head_dim = 128, .tied = true, .rope_base = 1e6f};
  return {
      {"tiny", synth_shape("qwen3", 64, 2, 4, 2, 192, 512, 512, SynthDecoder{.head_dim = 32, .tied = true, .rope_base = 1e6f})},
      {"0.6b", synth_shape("qwen3", 1024, 28, 16, 8, 3072, 151936, 40960, d128)},
      {"4b", synth_shape("qwen3", 2560, 36, 32, 8, 9728, 151936, 40960, d128)},
      {"8b", synth_shape("qwen3", 4096, 36, 32, 8, 12288, 151936, 40960, SynthDecoder{.head_dim = 128, .rope_base = 1e6f})},
  };
}

}  // namespace

const Family& qwen3_family() {
  static const Family f = [] {
    Family f{"qwen3", "Qwen3 (dense)", kRecipe, read, make_llama<kRecipe>, synth_qwen<kRecipe>, presets};
    f.classifier_head = true;
    return f;
  }();
  return f;
}

}  // namespace kestrel

// Qwen3.5 (dense: Qwen3.5-0.8B to 27B; Qwen3.6 the same), llama.cpp's llama_model_qwen35: three of every four
// blocks Gated DeltaNet linear attention, the fourth gated full attention, a SwiGLU FFN after each; value heads
// read key heads tiled (h % n_k). The layer is qwen35_layer.h's.
#include "model/arch/families.h"
#include "model/arch/qwen35_layer.h"

namespace kestrel {
namespace {

ModelConfig read(HparamReader& h, const ModelOptions&) { return read_qwen_hybrid(h, QwenHybrid::Qwen35); }

std::vector<SynthPreset> presets() {
  return {
      // tiny: 8 blocks (2 full attention), 4 value heads over 2 key heads, the MTP block.
      {"tiny", qwen_hybrid_shape("qwen35", {64, 8, 4, 2, 32, 128, 512, 2, 4, 16})},
      // tiny-vision (synth --mmproj): heads of 64 (16 rotary dims: sections 3, 3, 2 of 8 pairs) at base 10000, so
      // that an image's M-RoPE positions turn more than one pair and show in the greedy ids.
      {"tiny-vision", qwen_hybrid_shape("qwen35", {64, 8, 4, 2, 64, 128, 512, 2, 4, 16, 0, 0, 0, 0, 1, 1e4f})},
      {"0.8b", qwen_hybrid_shape("qwen35", {1024, 24, 8, 2, 256, 3584, 248320, 16, 16, 128})},
      {"9b", qwen_hybrid_shape("qwen35", {4096, 32, 16, 4, 256, 12288, 248320, 16, 32, 128})},
  };
}

}  // namespace

const Family& qwen35_family() {
  static const Family f{"qwen35", "Qwen3.5 / Qwen3.6 (dense)", {}, read, make_qwen_hybrid, synth_qwen_hybrid, presets};
  return f;
}

}  // namespace kestrel

// Qwen3.5-MoE (Qwen3.5-35B-A3B to 397B-A17B), llama.cpp's llama_model_qwen35moe: Qwen3.5's blocks
// (qwen35_layer.h) with routed experts (softmax, top-k renormalised) and a shared expert gated by
// sigmoid(x . ffn_gate_inp_shexp) in every block.
#include "model/arch/families.h"
#include "model/arch/qwen35_layer.h"

namespace kestrel {
namespace {

ModelConfig read(HparamReader& h, const ModelOptions&) { return read_qwen_hybrid(h, QwenHybrid::Qwen35Moe); }

std::vector<SynthPreset> presets() {
  return {
      // tiny: qwen35's tiny with 8 experts (top 2) and a shared expert.
      {"tiny", qwen_hybrid_shape("qwen35moe", {64, 8, 4, 2, 32, 128, 512, 2, 4, 16, 8, 2, 32, 64})},
      {"35b-a3b", qwen_hybrid_shape("qwen35moe", {2048, 40, 16, 2, 256, 512, 248320, 16, 32, 128, 256, 8, 512, 512})},
  };
}

}  // namespace

const Family& qwen35moe_family() {
  static const Family f{"qwen35moe", "Qwen3.5-MoE (35B-A3B, 122B-A10B, 397B-A17B)", {}, read, make_qwen_hybrid,
                        synth_qwen_hybrid, presets};
  return f;
}

}  // namespace kestrel

// Qwen3-Next (Qwen3-Next-80B-A3B), llama.cpp's llama_model_qwen3next: the hybrid blocks of qwen35_layer.h with
// plain NeoX RoPE (no sections), the fused ssm_ba projection, value heads reading key heads repeat-interleaved
// (h / (n_v / n_k)), and routed experts + a gated shared expert in every block.
#include "model/arch/families.h"
#include "model/arch/qwen35_layer.h"

namespace kestrel {
namespace {

ModelConfig read(HparamReader& h, const ModelOptions&) { return read_qwen_hybrid(h, QwenHybrid::Qwen3Next); }

std::vector<SynthPreset> presets() {
  return {
      {"tiny", qwen_hybrid_shape("qwen3next", {64, 8, 4, 2, 32, 128, 512, 2, 4, 16, 8, 2, 32, 64})},
      {"80b-a3b", qwen_hybrid_shape("qwen3next", {2048, 48, 16, 2, 256, 5120, 151936, 16, 32, 128, 512, 10, 512, 512})},
  };
}

}  // namespace

const Family& qwen3next_family() {
  static const Family f{"qwen3next", "Qwen3-Next-80B-A3B", {}, read, make_qwen_hybrid, synth_qwen_hybrid, presets};
  return f;
}

}  // namespace kestrel

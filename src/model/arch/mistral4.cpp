// Mistral Small 4 (`mistral4`): DeepSeek-V2's math — MLA with a query bottleneck, DeepSeekMoE — read and
// run by the deepseek2 family's parts (as llama.cpp's llama_model_mistral4 reuses its deepseek2 loader and
// graph), under its own architecture name, with its MLA sizes (a latent cache row of 320 = 256 + 64 rotary
// keys and 256 values at the real shape) and the query temperature by position
// (attention.temperature_scale/_length).
#include "model/arch/families.h"

namespace kestrel {
namespace {

SynthShape preset_shape(const std::string& preset) {
  SynthShape s;
  s.arch = "mistral4";
  SynthDeepseek& d = s.ds;
  if (preset == "tiny") {
    // The real model's head-size ratios at test width (per head key 2 x rotary, value = key), a query
    // temperature that changes the queries from position 4 on; a dense first layer, then MoE.
    s.dim = 64, s.layers = 3, s.heads = 4, s.ffn = 128, s.vocab = 512, s.ctx = 4096;
    d.q_lora = 48, d.kv_lora = 32, d.qk_nope = 32, d.qk_rope = 8, d.v_head = 32;
    d.experts = 8, d.experts_used = 2, d.experts_shared = 1, d.ffn_expert = 32;
    d.norm_weights = true;
    d.temp_scale = 0.5f, d.temp_length = 4;
  } else {  // small4: Mistral Small 4 (119B, 6.5B active) as transformers' Mistral4Config describes it
    s.dim = 4096, s.layers = 36, s.heads = 32, s.ffn = 12288, s.vocab = 131072, s.ctx = 262144;
    d.q_lora = 1024, d.kv_lora = 256, d.qk_nope = 64, d.qk_rope = 64, d.v_head = 128;  // latent 320 / 256
    d.dense_lead = 0, d.experts = 128, d.experts_used = 4, d.experts_shared = 1, d.ffn_expert = 2048;
    d.norm_weights = true;
  }
  s.kv_heads = s.heads;
  return s;
}

std::vector<SynthPreset> presets() { return {{"tiny", preset_shape("tiny")}, {"small4", preset_shape("small4")}}; }

}  // namespace

const Family& mistral4_family() {
  static const Family f = [] {
    Family m = deepseek2_family();
    m.name = "mistral4";
    m.models = "Mistral Small 4";
    m.presets = presets;
    return m;
  }();
  return f;
}

}  // namespace kestrel

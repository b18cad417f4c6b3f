#pragma once
// The Llama layer, which the Llama-derived families' files (llama, qwen2,
// qwen2moe, qwen3, qwen3moe, phi3, mistral3, llama4, gpt-oss) run with their
// own recipes and configs, as llama.cpp's do with its llama graph:
//
//   x += GQA attention(rmsnorm(x))   [q/k/v/o biases] [q/k head norms] [fused attn_qkv] [sinks]
//   x += SwiGLU FFN(rmsnorm(x))      [fused gate/up]  or the routed experts [+ shared expert]
//
// What the config says on top (model.h): sliding or chunked windows, RoPE-free layers, the query
// temperature, experts every layer_step-th layer weighting their input, biased experts with gpt-oss's SwiGLU.
//
// with RoPE frequency factors when the family's files carry them.
#include <memory>

#include "model/family.h"

namespace kestrel {

enum class RopeFactors {
  None,
  Llama3,    // rope_freqs.weight, when the file has it
  LongRope,  // rope_factors_short / rope_factors_long by the context (Phi-3)
};

std::unique_ptr<Model> make_llama_layers(const GgufFile& f, Backend& be, const ModelOptions& o, ModelConfig c,
                                         const LayerRecipe& recipe, RopeFactors factors);

// A family's Family::make when its layer is the Llama layer with recipe R.
template <const LayerRecipe& R, RopeFactors F = RopeFactors::None>
std::unique_ptr<Model> make_llama(const GgufFile& f, Backend& be, const ModelOptions& o, ModelConfig c) {
  return make_llama_layers(f, be, o, std::move(c), R, F);
}

// Qwen's expert width: expert_feed_forward_length, else feed_forward_length
// over the experts used; softmax routing, the chosen weights renormalised or not.
void read_qwen_experts(HparamReader& h, ModelConfig& c, bool normalize);

// A Qwen family's Family::synth: the GQA keys (norm epsilon 1e-6) and layers of recipe R.
template <const LayerRecipe& R>
void synth_qwen(SynthFile& out) {
  synth_gqa_keys(out, 1e-6f, /*expert_ffn_key=*/true);
  synth_gqa_layers(out, R);
}
}  // namespace kestrel

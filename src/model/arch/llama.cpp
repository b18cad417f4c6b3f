// Llama 1/2/3 (also TinyLlama, Mistral, DeepSeek-LLM/Coder and the
// R1-Distill-Llama models): the Llama layer (llama_layer.h), RoPE on
// adjacent pairs, optional q/k/v biases, Llama 3's `rope_freqs.weight`
// frequency divisors. Files with experts are Mixtral: softmax over the
// router, top-k, the chosen weights renormalised, each expert as wide as
// feed_forward_length.
#include <cmath>

#include "model/arch/families.h"
#include "model/arch/llama_layer.h"
#include "model/hparams_common.h"

namespace kestrel {
namespace {

constexpr LayerRecipe kRecipe{};

ModelConfig read(HparamReader& h, const ModelOptions&) {
  ModelConfig c = read_decoder_basics(h, RopeStyle::Adjacent);
  if (h.int_or("expert_count", 0) > 0) read_routed_experts(h, c, c.n_ff, /*normalize=*/true);
  return c;
}

// Llama 3's RoPE frequency divisors, by llama.cpp's converter rule
// (low_freq_factor 1, high_freq_factor 4).
std::vector<float> llama3_rope_freqs(int64_t n_rot, float base, float factor, int64_t orig_ctx) {
  std::vector<float> f;
  const double low_wavelen = static_cast<double>(orig_ctx) / 1.0, high_wavelen = static_cast<double>(orig_ctx) / 4.0;
  for (int64_t i = 0; i < n_rot; i += 2) {
    const double freq = 1.0 / std::pow(base, static_cast<double>(i) / n_rot), wavelen = 2 * M_PI / freq;
    if (wavelen < high_wavelen) f.push_back(1.0f);
    else if (wavelen > low_wavelen) f.push_back(factor);
    else {
      const double smooth = (orig_ctx / wavelen - 1.0) / (4.0 - 1.0);
      f.push_back(static_cast<float>(1.0 / ((1 - smooth) / factor + smooth)));
    }
  }
  return f;
}

void synth(SynthFile& out) {
  const SynthShape& s = out.shape();
  synth_gqa_keys(out, 1e-5f, /*expert_ffn_key=*/false);
  if (s.dec.rope_factor > 0)
    out.values("rope_freqs.weight", llama3_rope_freqs(synth_head_dim(s), s.dec.rope_base, s.dec.rope_factor,
                                                      s.dec.rope_orig_ctx));
  synth_gqa_layers(out, kRecipe);
}

std::vector<SynthPreset> presets() {
  return {
      {"tiny", synth_shape("llama", 64, 2, 4, 2, 192, 512, 512)},
      {"1b", synth_shape("llama", 2048, 22, 32, 4, 5632, 32000, 2048)},    // TinyLlama-1.1B
      {"7b", synth_shape("llama", 4096, 32, 32, 32, 11008, 32000, 4096)},  // Llama-2-7B
      {"llama3-1b",                                                        // Llama-3.2-1B
       synth_shape("llama", 2048, 16, 32, 8, 8192, 128256, 131072,
                   SynthDecoder{.tied = true, .rope_base = 5e5f, .rope_factor = 32.0f, .rope_orig_ctx = 8192})},
      {"llama3-8b",  // Llama-3.1-8B, R1-Distill-Llama-8B
       synth_shape("llama", 4096, 32, 32, 8, 14336, 128256, 131072,
                   SynthDecoder{.rope_base = 5e5f, .rope_factor = 8.0f, .rope_orig_ctx = 8192})},
      {"tiny-moe",
       synth_shape("llama", 64, 2, 4, 2, 96, 512, 512, SynthDecoder{.experts = 4, .experts_used = 2, .ffn_expert = 96})},
      {"mixtral",  // Mixtral-8x7B
       synth_shape("llama", 4096, 32, 32, 8, 14336, 32000, 32768,
                   SynthDecoder{.rope_base = 1e6f, .experts = 8, .experts_used = 2, .ffn_expert = 14336})},
  };
}

}  // namespace

const Family& llama_family() {
  static const Family f{"llama", "Llama 1-3, TinyLlama, Mistral, Mixtral, DeepSeek-LLM, R1-Distill-Llama",
                        kRecipe, read, make_llama<kRecipe, RopeFactors::Llama3>, synth, presets, /*awq_folds=*/true,
                        /*quant_70b_layers=*/80};
  return f;
}

}  // namespace kestrel

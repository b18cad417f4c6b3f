// Gemma 3, text: the Gemma layer (gemma_layer.h) with q/k head norms; five
// sliding layers then one global (llama.cpp's pattern 6, as the converter
// writes no pattern key); the sliding layers with their own RoPE base
// (rope.freq_base_swa, 10000) and no scaling, the global ones with the
// file's base and scaling (linear 8 for the 4B-27B models); soft-caps only
// when the file gives them.
#include "model/arch/families.h"
#include "model/arch/gemma_layer.h"
#include "model/hparams_common.h"

namespace kestrel {
namespace {

constexpr LayerRecipe kRecipe{.qk_norm = true, .post_norms = true, .ffn_act = FfnActivation::Gelu};

ModelConfig read(HparamReader& h, const ModelOptions&) {
  ModelConfig c = read_gemma_common(h, 62);
  c.attn_softcap = static_cast<float>(h.float_or("attn_logit_softcapping", 0.0));
  c.final_softcap = static_cast<float>(h.float_or("final_logit_softcapping", 0.0));
  if (c.attn_softcap < 0) throw h.bad("attn_logit_softcapping", "must not be negative");
  if (c.final_softcap < 0) throw h.bad("final_logit_softcapping", "must not be negative");
  const int pattern = static_cast<int>(h.int_or("attention.sliding_window_pattern", 6));
  set_sliding_layers(c, static_cast<int32_t>(h.need_int("attention.sliding_window")), pattern);
  c.rope_sliding.freq_base = static_cast<float>(h.float_or("rope.freq_base_swa", 10000.0));
  c.rope_sliding.freq_scale = 1.0f;
  c.rope_sliding.ext_factor = 0.0f;
  return c;
}

std::unique_ptr<Model> make(const GgufFile& f, Backend& be, const ModelOptions& o, ModelConfig c) {
  return make_gemma_layers(f, be, o, std::move(c), kRecipe);
}

void synth(SynthFile& out) {
  const SynthDecoder& d = out.shape().dec;
  synth_gqa_keys(out, 1e-6f, true);
  out.f32("rope.freq_base_swa", 10000.0f);
  if (d.rope_factor > 0) {
    out.str("rope.scaling.type", "linear");
    out.f32("rope.scaling.factor", d.rope_factor);
  }
  if (d.window > 0) out.u32("attention.sliding_window", d.window);
  synth_gqa_layers(out, kRecipe);
}

std::vector<SynthPreset> presets() {
  return {
      {"tiny", synth_shape("gemma3", 64, 6, 2, 1, 128, 512, 1024,
                           SynthDecoder{.head_dim = 32, .tied = true, .rope_base = 1e6f, .rope_factor = 8.0f, .window = 16})},
      // The tiny shape with embeddings of standard deviation 1/sqrt(dim): times Gemma's sqrt(dim) they are of the
      // branches' size, so what the layers compute (image rows included: synth --mmproj) decides the next token
      // rather than the last token's own embedding.
      {"tiny-vision", synth_shape("gemma3", 64, 6, 2, 1, 128, 512, 1024,
                                  SynthDecoder{.head_dim = 32, .tied = true, .rope_base = 1e6f, .rope_factor = 8.0f,
                                               .window = 16, .embed_std = 0.125f})},
      {"1b", synth_shape("gemma3", 1152, 26, 4, 1, 6912, 262144, 32768,
                         SynthDecoder{.head_dim = 256, .tied = true, .rope_base = 1e6f, .window = 512})},
      {"4b",  // Gemma-3-4B (text)
       synth_shape("gemma3", 2560, 34, 8, 4, 10240, 262208, 131072,
                   SynthDecoder{.head_dim = 256, .tied = true, .rope_base = 1e6f, .rope_factor = 8.0f, .window = 1024})},
  };
}

}  // namespace

const Family& gemma3_family() {
  static const Family f{"gemma3", "Gemma 3 (text)", kRecipe, read, make, synth, presets};
  return f;
}

}  // namespace kestrel

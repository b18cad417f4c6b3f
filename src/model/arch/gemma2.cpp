// Gemma 2: the Gemma layer (gemma_layer.h); every other layer from the first
// slides over the last 4096 positions (unless the file says otherwise),
// attention logits are soft-capped at 50 and the final logits at 30 (tanh),
// unless the file says otherwise.
#include "model/arch/families.h"
#include "model/arch/gemma_layer.h"
#include "model/hparams_common.h"

namespace kestrel {
namespace {

constexpr LayerRecipe kRecipe{.post_norms = true, .ffn_act = FfnActivation::Gelu};

ModelConfig read(HparamReader& h, const ModelOptions&) {
  ModelConfig c = read_gemma_common(h, 46);
  c.attn_softcap = static_cast<float>(h.float_or("attn_logit_softcapping", 50.0));
  c.final_softcap = static_cast<float>(h.float_or("final_logit_softcapping", 30.0));
  if (c.attn_softcap < 0) throw h.bad("attn_logit_softcapping", "must not be negative");
  if (c.final_softcap < 0) throw h.bad("final_logit_softcapping", "must not be negative");
  set_sliding_layers(c, static_cast<int32_t>(h.int_or("attention.sliding_window", 4096)), 2);
  return c;
}

std::unique_ptr<Model> make(const GgufFile& f, Backend& be, const ModelOptions& o, ModelConfig c) {
  return make_gemma_layers(f, be, o, std::move(c), kRecipe);
}

void synth(SynthFile& out) {
  synth_gqa_keys(out, 1e-6f, true);
  out.f32("attn_logit_softcapping", 50.0f);
  out.f32("final_logit_softcapping", 30.0f);
  if (out.shape().dec.window > 0) out.u32("attention.sliding_window", out.shape().dec.window);
  synth_gqa_layers(out, kRecipe);
}

std::vector<SynthPreset> presets() {
  return {
      {"tiny", synth_shape("gemma2", 64, 2, 2, 1, 192, 512, 512, SynthDecoder{.head_dim = 32, .tied = true, .window = 16})},
      {"2b", synth_shape("gemma2", 2304, 26, 8, 4, 9216, 256000, 8192,
                         SynthDecoder{.head_dim = 256, .tied = true, .window = 4096})},
      {"9b", synth_shape("gemma2", 3584, 42, 16, 8, 14336, 256000, 8192,
                         SynthDecoder{.head_dim = 256, .tied = true, .window = 4096})},
  };
}

}  // namespace

const Family& gemma2_family() {
  static const Family f{"gemma2", "Gemma 2", kRecipe, read, make, synth, presets};
  return f;
}

}  // namespace kestrel

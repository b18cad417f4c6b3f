// Mistral 3 (`mistral3`: Ministral 3 3B/8B/14B, their Reasoning variants, Magistral and Devstral files the
// converter writes under this name), as llama.cpp's llama_model_mistral3: the Llama layer (llama_layer.h,
// RoPE on adjacent pairs, rope_freqs when the file has them, an optional attn_output bias, Mixtral-style
// experts when the file has them) with
//   - YaRN from the file, its beta_fast / beta_slow and its log multiplier (HF's mscale_all_dim: the rotated
//     dims scaled by (1 + 0.1 ln f) / (1 + 0.1 m ln f), hparams_common.cpp's read_rope);
//   - the query temperature by position (`attention.temperature_scale`, HF's llama_4_scaling_beta): the
//     queries of position p times 1 + scale * ln(floor(p / n_orig) + 1), n_orig the YaRN original context.
// The tokenizer is Mistral's tekken (pre-tokenizer `tekken`).
#include "model/arch/families.h"
#include "model/arch/llama_layer.h"
#include "model/hparams_common.h"

namespace kestrel {
namespace {

constexpr LayerRecipe kRecipe{};

ModelConfig read(HparamReader& h, const ModelOptions&) {
  ModelConfig c = read_decoder_basics(h, RopeStyle::Adjacent);
  if (h.int_or("expert_count", 0) > 0) read_routed_experts(h, c, c.n_ff, /*normalize=*/true);
  c.query_temp.scale = static_cast<float>(h.float_or("attention.temperature_scale", 0.0));
  if (c.query_temp.on()) {
    // llama.cpp: the temperature's floor scale is the YaRN original context.
    if (c.n_ctx_orig <= 0)
      throw h.bad("attention.temperature_scale", "needs rope.scaling.original_context_length (or context_length)");
    c.query_temp.length = static_cast<int>(c.n_ctx_orig);
  }
  return c;
}

void synth(SynthFile& out) {
  const SynthDecoder& d = out.shape().dec;
  synth_gqa_keys(out, 1e-5f, /*expert_ffn_key=*/false);
  if (d.rope_factor > 0) {  // the converter's keys for Ministral 3's rope_parameters
    out.str("rope.scaling.type", "yarn");
    out.f32("rope.scaling.factor", d.rope_factor);
    out.u32("rope.scaling.original_context_length", d.rope_orig_ctx);
    out.f32("rope.scaling.yarn_beta_fast", 32.0f);
    out.f32("rope.scaling.yarn_beta_slow", 1.0f);
    out.f32("rope.scaling.yarn_log_multiplier", d.yarn_log_mul);
  }
  if (d.query_temp > 0) out.f32("attention.temperature_scale", d.query_temp);
  synth_gqa_layers(out, kRecipe);
}

std::vector<SynthPreset> presets() {
  // tiny: YaRN x4 over an original context of 16 with a log multiplier of 0.5 (so the rotated dims are not at
  // unit scale), and a query temperature of 0.5 that changes the queries from position 16 on.
  return {
      {"tiny", synth_shape("mistral3", 64, 2, 4, 2, 192, 512, 512,
                           SynthDecoder{.head_dim = 32, .rope_base = 1e6f, .rope_factor = 4.0f, .rope_orig_ctx = 16,
                                        .yarn_log_mul = 0.5f, .query_temp = 0.5f})},
      {"3b", synth_shape("mistral3", 3072, 26, 32, 8, 9216, 131072, 262144,
                         SynthDecoder{.head_dim = 128, .tied = true, .rope_base = 1e6f, .rope_factor = 16.0f,
                                      .rope_orig_ctx = 16384, .yarn_log_mul = 1.0f, .query_temp = 0.1f})},
      {"8b", synth_shape("mistral3", 4096, 34, 32, 8, 14336, 131072, 262144,
                         SynthDecoder{.head_dim = 128, .rope_base = 1e6f, .rope_factor = 16.0f, .rope_orig_ctx = 16384,
                                      .yarn_log_mul = 1.0f, .query_temp = 0.1f})},
      {"14b", synth_shape("mistral3", 5120, 40, 32, 8, 16384, 131072, 262144,
                          SynthDecoder{.head_dim = 128, .rope_base = 1e9f, .rope_factor = 16.0f,
                                       .rope_orig_ctx = 16384, .yarn_log_mul = 1.0f, .query_temp = 0.1f})},
  };
}

}  // namespace

const Family& mistral3_family() {
  static const Family f{"mistral3", "Ministral 3 (3B/8B/14B, Instruct and Reasoning), Magistral, Devstral", kRecipe,
                        read, make_llama<kRecipe, RopeFactors::Llama3>, synth, presets};
  return f;
}

}  // namespace kestrel

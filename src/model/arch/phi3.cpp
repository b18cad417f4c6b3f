// Phi-3 / Phi-3.5 / Phi-4-mini: the Llama layer (llama_layer.h) with one
// fused attn_qkv (q rows, then k, then v), ffn_up holding the gate rows then
// the up rows, RoPE on halves. LongRoPE: the file's rope_factors_short /
// rope_factors_long divide the frequencies, the long ones when the context
// exceeds rope.scaling.original_context_length (chosen at load), and
// rope.scaling.attn_factor multiplies cos and sin. A sliding window, when the
// file gives one, applies to every layer (as Hugging Face's Phi-3 does;
// llama.cpp currently ignores it, which only matters beyond the window: 2047
// tokens for Phi-3-mini-4k).
#include <cmath>

#include "model/arch/families.h"
#include "model/arch/llama_layer.h"
#include "model/hparams_common.h"

namespace kestrel {
namespace {

constexpr LayerRecipe kRecipe{.fused_qkv = true, .fused_gate_up = true};

ModelConfig read(HparamReader& h, const ModelOptions&) {
  ModelConfig c = read_decoder_basics(h, RopeStyle::NeoX);
  set_sliding_layers(c, static_cast<int32_t>(h.int_or("attention.sliding_window", 0)), 1);
  return c;
}

void synth(SynthFile& out) {
  const SynthShape& s = out.shape();
  const SynthDecoder& d = s.dec;
  synth_gqa_keys(out, 1e-5f, true);
  out.u32("rope.scaling.original_context_length", d.rope_orig_ctx);
  // LongRoPE's magnitude correction: sqrt(1 + ln(ctx / original) / ln(original)).
  out.f32("rope.scaling.attn_factor",
          static_cast<float>(std::sqrt(1.0 + std::log(static_cast<double>(s.ctx) / d.rope_orig_ctx) /
                                                 std::log(static_cast<double>(d.rope_orig_ctx)))));
  if (d.window > 0) out.u32("attention.sliding_window", d.window);
  // Short factors near 1, long ones growing with the pair's wavelength.
  const int64_t pairs = synth_head_dim(s) / 2;
  std::vector<float> shorts, longs;
  for (int64_t i = 0; i < pairs; i++) {
    shorts.push_back(1.0f + 0.05f * static_cast<float>(i) / static_cast<float>(pairs));
    longs.push_back(1.0f + 40.0f * static_cast<float>(i) / static_cast<float>(pairs));
  }
  out.values("rope_factors_short.weight", shorts);
  out.values("rope_factors_long.weight", longs);
  synth_gqa_layers(out, kRecipe);
}

std::vector<SynthPreset> presets() {
  return {
      {"tiny", synth_shape("phi3", 64, 2, 4, 4, 192, 512, 2048, SynthDecoder{.rope_orig_ctx = 256, .window = 2048})},
      {"mini", synth_shape("phi3", 3072, 32, 32, 32, 8192, 32064, 131072,
                           SynthDecoder{.rope_orig_ctx = 4096, .window = 262144})},  // Phi-3.5-mini
  };
}

}  // namespace

const Family& phi3_family() {
  static const Family f{"phi3", "Phi-3, Phi-3.5-mini, Phi-4-mini", kRecipe, read, make_llama<kRecipe, RopeFactors::LongRope>, synth, presets};
  return f;
}

}  // namespace kestrel

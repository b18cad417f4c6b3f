// Llama 4 (`llama4`: Llama-4-Scout-17B-16E, Llama-4-Maverick-17B-128E), text, as llama.cpp's llama_model_llama4:
//
//   x += GQA attention(rmsnorm(x))   three layers of four: RoPE on adjacent pairs (rope_freqs), a weightless
//                                     RMSNorm of each q and k head after it (Scout: files with 16 experts),
//                                     chunked attention (a key visible only inside the query's chunk of 8192);
//                                     every fourth: no RoPE, all earlier positions, the queries times
//                                     1 + 0.1 ln(floor((p + 1) / 8192) + 1)
//   x += FFN(rmsnorm(x))             a SwiGLU FFN, or on every interleave_moe_layer_step-th layer the experts:
//                                     top-k by router logit, sigmoid of the chosen logit applied to the expert's
//                                     input, plus the shared expert
//
// The Llama layer (llama_layer.h) runs it with this config. The chunk size, the temperature's floor and scale
// are llama.cpp's constants (not in the file, whose attention.sliding_window value llama.cpp ignores too); a
// file with attention.sliding_window = 0 (MobileLLM-style) is refused.
#include <fmt/format.h>

#include "model/arch/families.h"
#include "model/arch/llama_layer.h"
#include "model/hparams_common.h"

namespace kestrel {
namespace {

constexpr LayerRecipe kRecipe{};
constexpr int32_t kChunk = 8192;

ModelConfig read(HparamReader& h, const ModelOptions&) {
  ModelConfig c = read_decoder_basics(h, RopeStyle::Adjacent);
  MoeConfig& e = c.moe;
  read_expert_counts(h, c);
  if (e.routing.n_expert == 0) throw h.bad("expert_count", "llama4 models have experts");
  e.routing.gating = ExpertGating::Sigmoid;  // weighted by the chosen logit's sigmoid,
  e.routing.select_by_logit = true;          // chosen by the logit itself (as llama.cpp: no saturated ties)
  e.routing.normalize = false;
  e.n_ff_expert = h.need_int("expert_feed_forward_length");
  if (e.n_ff_expert <= 0) throw h.bad("expert_feed_forward_length", "must be positive");
  e.n_ff_shared = e.n_ff_expert;
  e.weight_input = true;
  e.layer_step = static_cast<int>(h.need_int("interleave_moe_layer_step"));
  if (e.layer_step <= 0) throw h.bad("interleave_moe_layer_step", "must be positive");
  // llama.cpp: chunks of 8192 on three layers of four (whatever a window key says), the fourth without RoPE.
  // Its window-0 form (MobileLLM-style files) drops RoPE on the last layer and then asserts on a temperature of
  // 0: refused rather than guessed.
  if (const auto window = h.opt_int("attention.sliding_window"); window && *window == 0)
    throw h.bad("attention.sliding_window", "= 0 (no chunked attention) is not supported for llama4");
  set_sliding_layers(c, kChunk, static_cast<int>(h.int_or("attention.sliding_window_pattern", 4)));
  c.window_chunked = true;
  c.rope_sliding = c.rope;
  c.rope_sliding.freq_base = static_cast<float>(h.float_or("rope.freq_base_swa", c.rope.freq_base));
  c.rope.n_rot = 0;  // the full layers: no RoPE
  c.query_temp = {.scale = 0.1f, .length = 8192, .offset = 1.0f, .nope_only = true};
  c.rope_qk_norm = e.routing.n_expert != 128;  // llama.cpp: all but the 128-expert model (Maverick)
  return c;
}

// llama.cpp's converter's keys and tensors (conversion/llama.py's Llama4Model).
void synth(SynthFile& out) {
  const SynthShape& s = out.shape();
  const SynthDecoder& d = s.dec;
  if (d.experts <= 0) throw Error("llama4: the shape needs experts");
  synth_gqa_keys(out, 1e-5f, /*expert_ffn_key=*/true);
  out.u32("interleave_moe_layer_step", d.moe_step);
  const int64_t head = synth_head_dim(s), q_dim = s.heads * head, kv_dim = s.kv_heads * head;
  const float in_std = SynthFile::fan_in(s.dim);
  for (int64_t l = 0; l < s.layers; l++) {
    const std::string p = fmt::format("blk.{}.", l);
    out.norm(p + "attn_norm.weight", s.dim);
    out.qkv(p, q_dim, kv_dim);
    out.random(p + "attn_output.weight", {q_dim, s.dim}, out.residual_std(q_dim));
    out.norm(p + "ffn_norm.weight", s.dim);
    if ((l + 1) % d.moe_step == 0) {
      out.random(p + "ffn_gate_inp.weight", {s.dim, d.experts}, in_std);
      out.gated_ffn(p, "_exps", d.ffn_expert, {d.experts});
      out.gated_ffn(p, "_shexp", d.ffn_expert);
    } else {
      out.gated_ffn(p, "", s.ffn);
    }
  }
}

std::vector<SynthPreset> presets() {
  // tiny: 4 layers (chunked, chunked, chunked, no RoPE), experts on every second layer (8, top-1) with the
  // q/k norms of Scout's form; a context past the 8192-position chunk and temperature floor.
  return {
      {"tiny", synth_shape("llama4", 64, 4, 4, 2, 128, 512, 16384,
                           SynthDecoder{.head_dim = 16, .rope_base = 5e5f, .experts = 8, .experts_used = 1,
                                        .ffn_expert = 32, .moe_step = 2})},
      {"scout", synth_shape("llama4", 5120, 48, 40, 8, 16384, 202048, 10485760,
                            SynthDecoder{.head_dim = 128, .rope_base = 5e5f, .experts = 16, .experts_used = 1,
                                         .ffn_expert = 8192, .moe_step = 1})},
      {"maverick", synth_shape("llama4", 5120, 48, 40, 8, 16384, 202048, 1048576,
                               SynthDecoder{.head_dim = 128, .rope_base = 5e5f, .experts = 128, .experts_used = 1,
                                            .ffn_expert = 8192, .moe_step = 2})},
  };
}

}  // namespace

const Family& llama4_family() {
  static const Family f{"llama4", "Llama 4 Scout (17B-16E), Maverick (17B-128E), text", kRecipe, read,
                        make_llama<kRecipe, RopeFactors::Llama3>, synth, presets};
  return f;
}

}  // namespace kestrel

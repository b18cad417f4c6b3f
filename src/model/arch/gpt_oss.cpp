// gpt-oss (gpt-oss-20b, gpt-oss-120b), as llama.cpp's openai-moe graph:
//
//   x += GQA attention(rmsnorm(x))   q/k/v/o biases, per-head sinks, NeoX RoPE with YaRN on every layer,
//                                     every other layer from the first over a sliding window (the file's)
//   x += experts(rmsnorm(x))         the norm is the file's post_attention_norm; routed by softmax over the
//                                     top-k of the biased router logits; each expert biased, with the clamped
//                                     SwiGLU g * sigmoid(1.702 g) * (u + 1) at limit 7; no shared expert
//
// The Llama layer (llama_layer.h) runs it with this recipe and config. The sliding layers keep only their
// window's blocks of the cache. feed_forward_length describes no tensor.
#include <fmt/format.h>

#include "model/arch/families.h"
#include "model/arch/llama_layer.h"
#include "model/hparams_common.h"

namespace kestrel {
namespace {

constexpr LayerRecipe kRecipe{.qkv_bias = true, .attn_sinks = true, .ffn_norm = LayerRecipe::FfnNorm::PostAttention};
// llama.cpp's LLM_FFN_SWIGLU_OAI_MOE constants (not in the file).
constexpr float kSwigluAlpha = 1.702f, kSwigluLimit = 7.0f;

ModelConfig read(HparamReader& h, const ModelOptions&) {
  ModelConfig c = read_decoder_basics(h, RopeStyle::NeoX);
  read_expert_counts(h, c);
  if (const auto g = h.opt_int("expert_gating_func"); g && *g != static_cast<int>(ExpertGating::SoftmaxWeight))
    throw h.bad("expert_gating_func", fmt::format("= {}: gpt-oss routes by softmax over the chosen logits (3)", *g));
  c.moe.routing.gating = ExpertGating::SoftmaxWeight;
  c.moe.n_ff_expert = h.need_int("expert_feed_forward_length");
  if (c.moe.n_ff_expert <= 0) throw h.bad("expert_feed_forward_length", "must be positive");
  c.moe.swiglu_alpha = kSwigluAlpha;
  c.moe.swiglu_limit = kSwigluLimit;
  const auto window = h.need_int("attention.sliding_window");
  if (window <= 0) throw h.bad("attention.sliding_window", "must be positive");
  set_sliding_layers(c, static_cast<int32_t>(window), static_cast<int>(h.int_or("attention.sliding_window_pattern", 2)));
  c.rope_sliding.freq_base = static_cast<float>(h.float_or("rope.freq_base_swa", c.rope.freq_base));
  return c;
}

// llama.cpp's converter's keys and tensors (conversion/gpt_oss.py): biases and sinks in F32.
void synth(SynthFile& out) {
  const SynthShape& s = out.shape();
  const SynthDecoder& d = s.dec;
  if (d.experts <= 0 || d.window <= 0) throw Error("gpt-oss: the shape needs experts and a sliding window");
  synth_gqa_keys(out, 1e-5f, /*expert_ffn_key=*/true);
  out.u32("attention.sliding_window", d.window);
  if (d.rope_factor > 0) {
    out.str("rope.scaling.type", "yarn");
    out.f32("rope.scaling.factor", d.rope_factor);
    out.u32("rope.scaling.original_context_length", d.rope_orig_ctx);
  }
  const int64_t head = synth_head_dim(s), q_dim = s.heads * head, kv_dim = s.kv_heads * head;
  const float in_std = SynthFile::fan_in(s.dim);
  for (int64_t l = 0; l < s.layers; l++) {
    const std::string p = fmt::format("blk.{}.", l);
    out.norm(p + "attn_norm.weight", s.dim);
    out.qkv(p, q_dim, kv_dim, 0.1f);
    out.random(p + "attn_output.weight", {q_dim, s.dim}, out.residual_std(q_dim));
    out.random(p + "attn_output.bias", {s.dim}, 0.02f);
    out.random(p + "attn_sinks.weight", {s.heads}, 1.0f);
    out.norm(p + "post_attention_norm.weight", s.dim);
    out.random(p + "ffn_gate_inp.weight", {s.dim, d.experts}, in_std);
    out.random(p + "ffn_gate_inp.bias", {d.experts}, 0.5f);
    out.gated_ffn(p, "_exps", d.ffn_expert, {d.experts});
    out.random(p + "ffn_gate_exps.bias", {d.ffn_expert, d.experts}, 0.1f);
    out.random(p + "ffn_up_exps.bias", {d.ffn_expert, d.experts}, 0.1f);
    out.random(p + "ffn_down_exps.bias", {s.dim, d.experts}, 0.02f);
  }
}

std::vector<SynthPreset> presets() {
  // tiny: windows of 8 on layers 0 and 2, YaRN over an original context of 64, 8 experts of which 4 are used.
  return {
      {"tiny", synth_shape("gpt-oss", 64, 4, 4, 2, 32, 512, 512,
                           SynthDecoder{.head_dim = 16, .rope_base = 150000.0f, .rope_factor = 8.0f,
                                        .rope_orig_ctx = 64, .window = 8, .experts = 8, .experts_used = 4,
                                        .ffn_expert = 32})},
      {"20b", synth_shape("gpt-oss", 2880, 24, 64, 8, 2880, 201088, 131072,
                          SynthDecoder{.head_dim = 64, .rope_base = 150000.0f, .rope_factor = 32.0f,
                                       .rope_orig_ctx = 4096, .window = 128, .experts = 32, .experts_used = 4,
                                       .ffn_expert = 2880})},
      {"120b", synth_shape("gpt-oss", 2880, 36, 64, 8, 2880, 201088, 131072,
                           SynthDecoder{.head_dim = 64, .rope_base = 150000.0f, .rope_factor = 32.0f,
                                        .rope_orig_ctx = 4096, .window = 128, .experts = 128, .experts_used = 4,
                                        .ffn_expert = 2880})},
  };
}

}  // namespace

const Family& gpt_oss_family() {
  static const Family f{"gpt-oss", "gpt-oss-20b, gpt-oss-120b", kRecipe, read, make_llama<kRecipe>, synth, presets};
  return f;
}

}  // namespace kestrel

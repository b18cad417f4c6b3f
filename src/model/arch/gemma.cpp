// Gemma 2 and Gemma 3 (text): embeddings scaled by sqrt(n_embd), RMSNorm of
// each branch's output before its residual add (post_attention_norm,
// post_ffw_norm), a GELU-gated FFN, RoPE on halves, queries scaled by
// 1/sqrt(head size) (1/sqrt(n_embd / n_head) for the 27B models, as
// llama.cpp and gemma_pytorch do), and sliding-window layers:
//  - Gemma 2: every other layer from the first slides (window 4096 unless
//    the file says), attention logits soft-capped (50) and final logits too (30);
//  - Gemma 3: q/k head norms, five sliding layers then one global, the
//    sliding ones with their own RoPE base (rope.freq_base_swa, 10000) and
//    no scaling, the global ones with the file's base and scaling; soft-caps
//    only when the file gives them.
#include <cmath>

#include "model/arch/architectures.h"
#include "model/decoder_config.h"

namespace kestrel {
namespace {

ModelConfig read_gemma_common(HparamReader& h, int n_layer_27b) {
  ModelConfig c = read_decoder_basics(h, RopeStyle::NeoX);
  c.embed_scale = std::sqrt(static_cast<float>(c.n_embd));
  c.post_norms = true;
  c.ffn_act = FfnActivation::Gelu;
  const int64_t query_pre_attn = c.n_layer == n_layer_27b ? c.n_embd / c.n_head : c.head_dim;
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(query_pre_attn));
  return c;
}

}  // namespace

ModelConfig read_gemma2_arch(HparamReader& h, const ModelOptions&) {
  ModelConfig c = read_gemma_common(h, 46);
  c.attn_softcap = static_cast<float>(h.float_or("attn_logit_softcapping", 50.0));
  c.final_softcap = static_cast<float>(h.float_or("final_logit_softcapping", 30.0));
  if (c.attn_softcap < 0) throw h.bad("attn_logit_softcapping", "must not be negative");
  if (c.final_softcap < 0) throw h.bad("final_logit_softcapping", "must not be negative");
  set_sliding_layers(c, static_cast<int32_t>(h.int_or("attention.sliding_window", 4096)), 2);
  return c;
}

ModelConfig read_gemma3_arch(HparamReader& h, const ModelOptions&) {
  ModelConfig c = read_gemma_common(h, 62);
  c.qk_norm = true;
  c.attn_softcap = static_cast<float>(h.float_or("attn_logit_softcapping", 0.0));
  c.final_softcap = static_cast<float>(h.float_or("final_logit_softcapping", 0.0));
  const int pattern = static_cast<int>(h.int_or("attention.sliding_window_pattern", 6));
  set_sliding_layers(c, static_cast<int32_t>(h.need_int("attention.sliding_window")), pattern);
  c.rope_sliding.freq_base = static_cast<float>(h.float_or("rope.freq_base_swa", 10000.0));
  c.rope_sliding.freq_scale = 1.0f;
  c.rope_sliding.ext_factor = 0.0f;
  return c;
}

}  // namespace kestrel

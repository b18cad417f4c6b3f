#pragma once
// What Gemma 2 and Gemma 3 share: embeddings scaled by sqrt(n_embd), RMSNorm
// of each branch's output before its residual add (post_attention_norm,
// post_ffw_norm), a GELU-gated FFN, RoPE on halves, and queries scaled by
// 1/sqrt(head size) — 1/sqrt(n_embd / n_head) for the 27B models (told apart
// by their layer count), as llama.cpp and gemma_pytorch do.
#include <cmath>

#include "model/decoder_config.h"

namespace kestrel {

inline ModelConfig read_gemma_common(HparamReader& h, int n_layer_27b) {
  ModelConfig c = read_decoder_basics(h, RopeStyle::NeoX);
  c.embed_scale = std::sqrt(static_cast<float>(c.n_embd));
  c.post_norms = true;
  c.ffn_act = FfnActivation::Gelu;
  const int64_t query_pre_attn = c.n_layer == n_layer_27b ? c.n_embd / c.n_head : c.head_dim;
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(query_pre_attn));
  return c;
}

}  // namespace kestrel

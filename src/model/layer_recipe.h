#pragma once
#include "model/model.h"

namespace kestrel {

// What a family's layer is made of, as data: its own layer code passes it to
// the shared blocks, synth writes the tensors it implies and the float64
// reference (measure/f64_reference.cpp) computes the math it names — one
// description instead of three copies.
struct LayerRecipe {
  enum class Attention { Gqa, Mla, Compressed };  // Compressed: DeepSeek-V4's
  Attention attention = Attention::Gqa;
  bool qkv_bias = false;       // q/k/v biases (Qwen2; optional in Llama files, never written by synth there)
  bool qk_norm = false;        // RMSNorm of each query and key head before RoPE (Qwen3, Gemma 3)
  bool fused_qkv = false;      // one attn_qkv matrix: q rows, then k, then v (Phi-3)
  bool fused_gate_up = false;  // ffn_up holds the gate rows, then the up rows (Phi-3)
  bool post_norms = false;     // RMSNorm of each branch's output before its residual add (Gemma 2/3)
  bool attn_sinks = false;     // attn_sinks: a logit per head in the softmax's denominator; attn_output.bias (gpt-oss)
  // The pre-FFN norm's tensor: ffn_norm, or post_attention_norm (gpt-oss names it so).
  enum class FfnNorm { Ffn, PostAttention };
  FfnNorm ffn_norm = FfnNorm::Ffn;
  FfnActivation ffn_act = FfnActivation::Silu;  // SwiGLU, or GeGLU (Gemma)
};

}  // namespace kestrel

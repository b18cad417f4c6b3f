#pragma once
// The Gemma layer, which Gemma 2 and Gemma 3 share (their files set the
// rest): embeddings scaled by sqrt(n_embd), RMSNorm of each branch's output
// before its residual add (post_attention_norm, post_ffw_norm), a
// GELU-gated FFN, RoPE on halves, and queries scaled by 1/sqrt(head size) —
// 1/sqrt(n_embd / n_head) for the 27B models (told apart by their layer
// count), as llama.cpp and gemma_pytorch do:
//
//   x = embed(tokens) * sqrt(n_embd)
//   x += rmsnorm(GQA attention(rmsnorm(x)))   [q/k head norms: Gemma 3] [soft-capped scores: Gemma 2]
//   x += rmsnorm(GeGLU FFN(rmsnorm(x)))
//   logits = rmsnorm(x) . Wout                [soft-capped: Gemma 2]
#include <memory>

#include "model/family.h"

namespace kestrel {

ModelConfig read_gemma_common(HparamReader& h, int n_layer_27b);

std::unique_ptr<Model> make_gemma_layers(const GgufFile& f, Backend& be, const ModelOptions& o, ModelConfig c,
                                         const LayerRecipe& recipe);

}  // namespace kestrel

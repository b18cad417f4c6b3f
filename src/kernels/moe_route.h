#pragma once
// DeepSeekMoE routing: which experts each token goes to, and with what
// weight. Pure arithmetic on the router's logits (one row of n_expert per
// token), as DeepSeek-V2/V3 and llama.cpp's build_moe_ffn do it:
//   scores    = softmax(logits), sigmoid(logits), sqrt(softplus(logits)) (DeepSeek-V4) or the logits
//               themselves (gpt-oss: softmax-weight, the softmax taken over the chosen ones alone)
//   selection = scores + bias            (V3's correction bias: selection only)
//   groups    = the n_group_used groups with the largest sum of their two
//               best selection scores; experts outside them are not eligible
//   chosen    = the n_used eligible experts with the largest selection score
//   weights   = scores of the chosen (unbiased) [softmax-weight: their softmax],
//               optionally divided by their sum, then times scale
#include <cstdint>

namespace kestrel {

enum class ExpertGating { Softmax = 1, Sigmoid = 2, SoftmaxWeight = 3, SqrtSoftplus = 4 };  // GGUF expert_gating_func values

struct MoeRouting {
  int n_expert = 0;
  int n_used = 0;
  ExpertGating gating = ExpertGating::Softmax;
  int n_group = 1;         // experts split into this many equal groups
  int n_group_used = 1;    // groups a token may choose from (== n_group: no limit)
  bool normalize = false;  // divide the chosen weights by their sum
  float scale = 1.0f;      // routed scaling factor
  bool select_by_logit = false;  // Llama 4: chosen by the raw logits (no bias), weighted by their scores
  // Per call, or null: the chosen experts given (ids[t * n_used + k]: DeepSeek-V4's hash-routed layers, where
  // the token picks them), the weights still the scores of those.
  const int32_t* forced = nullptr;
};

// For n tokens: ids[t * n_used + k] and weights[...] of the k-th chosen
// expert, best first. bias: n_expert floats or null. scratch: at least
// 2 * n_expert floats.
void moe_route(const MoeRouting& r, const float* logits, const float* bias, int64_t n, int32_t* ids, float* weights,
               float* scratch);

}  // namespace kestrel

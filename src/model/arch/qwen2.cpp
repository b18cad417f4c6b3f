// Qwen2 / Qwen2.5 and the DeepSeek-R1-Distill-Qwen models: the Llama layer
// with q/k/v biases and RoPE on halves (NeoX). Qwen2-MoE adds routed experts
// (softmax, top-k, weights not renormalised) and a shared expert whose
// output is scaled per token by sigmoid(x . ffn_gate_inp_shexp).
#include <fmt/format.h>

#include "model/arch/architectures.h"
#include "model/decoder_config.h"

namespace kestrel {

ModelConfig read_qwen2_arch(HparamReader& h, const ModelOptions&) { return read_decoder_basics(h, RopeStyle::NeoX); }

ModelConfig read_qwen2moe_arch(HparamReader& h, const ModelOptions&) {
  ModelConfig c = read_decoder_basics(h, RopeStyle::NeoX);
  const int64_t used = h.need_int("expert_used_count");
  read_routed_experts(h, c, h.int_or("expert_feed_forward_length", c.n_ff / used), /*normalize=*/false);
  c.moe.n_shared = 1;
  c.moe.n_ff_shared = h.int_or("expert_shared_feed_forward_length", c.n_ff);
  c.moe.shared_gate = true;
  return c;
}

}  // namespace kestrel

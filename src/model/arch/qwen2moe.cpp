// Qwen2-MoE (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B): Qwen2's attention with
// routed experts (softmax over the router, top-k, weights not renormalised)
// and a shared expert whose output each token scales by
// sigmoid(x . ffn_gate_inp_shexp).
#include "model/arch/architectures.h"
#include "model/decoder_config.h"

namespace kestrel {

ModelConfig read_qwen2moe_arch(HparamReader& h, const ModelOptions&) {
  ModelConfig c = read_decoder_basics(h, RopeStyle::NeoX);
  const int64_t used = h.need_int("expert_used_count");
  read_routed_experts(h, c, h.int_or("expert_feed_forward_length", c.n_ff / used), /*normalize=*/false);
  c.moe.n_ff_shared = h.int_or("expert_shared_feed_forward_length", c.n_ff);
  c.moe.shared_gate = true;
  return c;
}

}  // namespace kestrel

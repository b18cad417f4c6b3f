// Qwen3-MoE (Qwen3-30B-A3B, 235B-A22B): Qwen3's attention with routed
// experts (softmax over the router, top-k, weights renormalised) and no
// shared expert; its feed_forward_length describes no tensor.
#include "model/arch/architectures.h"
#include "model/decoder_config.h"

namespace kestrel {

ModelConfig read_qwen3moe_arch(HparamReader& h, const ModelOptions& o) {
  ModelConfig c = read_qwen3_arch(h, o);
  const int64_t used = h.need_int("expert_used_count");
  read_routed_experts(h, c, h.int_or("expert_feed_forward_length", c.n_ff / used), /*normalize=*/true);
  return c;
}

}  // namespace kestrel

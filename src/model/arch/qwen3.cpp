// Qwen3: RMSNorm of each query and key head (attn_q_norm / attn_k_norm)
// before RoPE (NeoX), no biases; the head size comes from key_length and may
// differ from n_embd / n_head. Qwen3-MoE adds routed experts (softmax over
// the router, top-k, weights renormalised) and no shared expert; its
// feed_forward_length describes no tensor.
#include "model/arch/architectures.h"
#include "model/decoder_config.h"

namespace kestrel {

ModelConfig read_qwen3_arch(HparamReader& h, const ModelOptions&) {
  ModelConfig c = read_decoder_basics(h, RopeStyle::NeoX);
  c.qk_norm = true;
  return c;
}

ModelConfig read_qwen3moe_arch(HparamReader& h, const ModelOptions& o) {
  ModelConfig c = read_qwen3_arch(h, o);
  const int64_t used = h.need_int("expert_used_count");
  read_routed_experts(h, c, h.int_or("expert_feed_forward_length", c.n_ff / used), /*normalize=*/true);
  return c;
}

}  // namespace kestrel

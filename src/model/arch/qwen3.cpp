// Qwen3: RMSNorm of each query and key head (attn_q_norm / attn_k_norm)
// before RoPE (NeoX), no biases; the head size comes from key_length and may
// differ from n_embd / n_head (Qwen3-0.6B: 16 heads of 128 on a 1024 stream).
#include "model/arch/architectures.h"
#include "model/decoder_config.h"

namespace kestrel {

ModelConfig read_qwen3_arch(HparamReader& h, const ModelOptions&) {
  ModelConfig c = read_decoder_basics(h, RopeStyle::NeoX);
  c.qk_norm = true;
  return c;
}

}  // namespace kestrel

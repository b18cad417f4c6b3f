// Gemma 2 (gemma_common.h for what it shares with Gemma 3): every other
// layer from the first slides over the last 4096 positions (unless the file
// says otherwise), attention logits are soft-capped at 50 and the final
// logits at 30 (tanh), unless the file says otherwise.
#include "model/arch/architectures.h"
#include "model/arch/gemma_common.h"

namespace kestrel {

ModelConfig read_gemma2_arch(HparamReader& h, const ModelOptions&) {
  ModelConfig c = read_gemma_common(h, 46);
  c.attn_softcap = static_cast<float>(h.float_or("attn_logit_softcapping", 50.0));
  c.final_softcap = static_cast<float>(h.float_or("final_logit_softcapping", 30.0));
  if (c.attn_softcap < 0) throw h.bad("attn_logit_softcapping", "must not be negative");
  if (c.final_softcap < 0) throw h.bad("final_logit_softcapping", "must not be negative");
  set_sliding_layers(c, static_cast<int32_t>(h.int_or("attention.sliding_window", 4096)), 2);
  return c;
}

}  // namespace kestrel

// Gemma 3, text (gemma_common.h for what it shares with Gemma 2): q/k head
// norms; five sliding layers then one global (llama.cpp's pattern 6, as the
// converter writes no pattern key); the sliding layers with their own RoPE
// base (rope.freq_base_swa, 10000) and no scaling, the global ones with the
// file's base and scaling (linear 8 for the 4B-27B models); soft-caps only
// when the file gives them.
#include "model/arch/architectures.h"
#include "model/arch/gemma_common.h"

namespace kestrel {

ModelConfig read_gemma3_arch(HparamReader& h, const ModelOptions&) {
  ModelConfig c = read_gemma_common(h, 62);
  c.qk_norm = true;
  c.attn_softcap = static_cast<float>(h.float_or("attn_logit_softcapping", 0.0));
  c.final_softcap = static_cast<float>(h.float_or("final_logit_softcapping", 0.0));
  if (c.attn_softcap < 0) throw h.bad("attn_logit_softcapping", "must not be negative");
  if (c.final_softcap < 0) throw h.bad("final_logit_softcapping", "must not be negative");
  const int pattern = static_cast<int>(h.int_or("attention.sliding_window_pattern", 6));
  set_sliding_layers(c, static_cast<int32_t>(h.need_int("attention.sliding_window")), pattern);
  c.rope_sliding.freq_base = static_cast<float>(h.float_or("rope.freq_base_swa", 10000.0));
  c.rope_sliding.freq_scale = 1.0f;
  c.rope_sliding.ext_factor = 0.0f;
  return c;
}

}  // namespace kestrel

// Phi-3 / Phi-3.5 / Phi-4-mini: one fused attn_qkv (q rows, then k, then v),
// ffn_up holding the gate rows then the up rows, RoPE on halves. LongRoPE:
// the file's rope_factors_short / rope_factors_long divide the frequencies,
// the long ones when the context exceeds rope.scaling.original_context_length
// (chosen at load, model/decoder_model.cpp), and rope.scaling.attn_factor
// multiplies cos and sin. A sliding window, when the file gives one, applies
// to every layer (as Hugging Face's Phi-3 does; llama.cpp currently ignores
// it, which only matters beyond the window: 2047 tokens for Phi-3-mini-4k).
#include "model/arch/architectures.h"
#include "model/decoder_config.h"

namespace kestrel {

ModelConfig read_phi3_arch(HparamReader& h, const ModelOptions&) {
  ModelConfig c = read_decoder_basics(h, RopeStyle::NeoX);
  c.fused_qkv = true;
  c.fused_gate_up = true;
  set_sliding_layers(c, static_cast<int32_t>(h.int_or("attention.sliding_window", 0)), 1);
  return c;
}

}  // namespace kestrel

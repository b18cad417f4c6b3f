#pragma once
// The linear-attention hybrids' layer (qwen35_layer.cpp), shared by `qwen3next`, `qwen35` and `qwen35moe`
// (each family's file says what it is): per block, as llama.cpp's llama_model_qwen35 / qwen3next graphs,
//
//   x += Gated DeltaNet(rmsnorm(x))    three blocks of four (attention.recurrent_layers, or every block but each
//        or gated attention(...)       full_attention_interval-th): ops/gated_delta_net.h over the
//                                      sequence's recurrent state, its output RMSNormed per head (ssm_norm),
//                                      times silu(z), through ssm_out; else attention whose attn_q gives each
//                                      head's query and gate, q/k head norms, partial NeoX RoPE, output times
//                                      sigmoid(gate)
//   x += FFN(rmsnorm(x))               post_attention_norm; SwiGLU (qwen35) or routed experts + the shared
//                                      expert gated by sigmoid(x . ffn_gate_inp_shexp) (qwen3next, qwen35moe)
//
// and the multi-token-prediction block after the trunk (a full-attention block inside DeepSeek's nextn
// wrapper). The attention blocks keep KV rows; the Gated DeltaNet blocks a recurrent state per sequence in
// the cache's state slots (kv/kv_layout.h), which a step starting at position 0 resets and a step of more
// than one row checkpoints first (a rollback restores it: runtime/step_executor.cpp).
#include <memory>
#include <vector>

#include "model/family.h"
#include "model/family_part.h"
#include "ops/gated_delta_net.h"

namespace kestrel {

// Linear-attention hybrids (`qwen3next`, `qwen35`, `qwen35moe`: model/arch/qwen35_layer.cpp): Gated DeltaNet
// layers (ops/gated_delta_net.h) with a recurrent state per sequence beside gated full-attention layers.
struct HybridConfig {
  GdnShape gdn;                    // d_conv 0: not a hybrid
  std::vector<uint8_t> recurrent;  // per block (trunk, then MTP): 1 for a Gated DeltaNet layer
  bool on() const { return gdn.d_conv > 0; }
  bool is_recurrent(int layer) const {
    return layer < static_cast<int>(recurrent.size()) && recurrent[static_cast<size_t>(layer)];
  }
};

// The linear-attention hybrids' extras (qwen3next, qwen35, qwen35moe): the Gated DeltaNet layers' key and
// value heads and head size, the convolution's taps, every interval-th block full attention; nextn MTP blocks.
struct SynthHybrid {
  int64_t k_heads = 0, v_heads = 0, state = 0, d_conv = 4, interval = 4, nextn = 0;
};

inline const HybridConfig& hybrid_config(const ModelConfig& c) { return family_part<HybridConfig>(c.family); }
inline const SynthHybrid& synth_hybrid(const SynthShape& s) { return family_part<SynthHybrid>(s.family); }

enum class QwenHybrid { Qwen3Next, Qwen35, Qwen35Moe };

ModelConfig read_qwen_hybrid(HparamReader& h, QwenHybrid kind);
std::unique_ptr<Model> make_qwen_hybrid(const GgufFile& f, Backend& be, const ModelOptions& o, ModelConfig c);
void synth_qwen_hybrid(SynthFile& out);

// A synth shape: dim, layers, attention heads / KV heads / head size, FFN (dense) or expert widths, vocab;
// the linear layers' key and value heads and head size; experts 0: dense.
struct QwenHybridShape {
  int64_t dim, layers, heads, kv_heads, head_dim, ffn, vocab;
  int64_t k_heads, v_heads, state;
  int64_t experts = 0, used = 0, ffn_expert = 0, ffn_shared = 0;
  int64_t nextn = 1;
  float rope_base = 1e7f;
  float embed_std = 0;  // token embeddings' standard deviation (0: synth's 1)
};
SynthShape qwen_hybrid_shape(const char* arch, const QwenHybridShape& s);

}  // namespace kestrel

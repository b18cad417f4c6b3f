#pragma once
// Grouped-query self-attention over the paged KV cache, the block the
// Llama-derived families' layers call (model/arch/): q, k, v projections
// (separate with optional biases, or one fused attn_qkv), optional RMSNorm
// of each query and key head, RoPE, the keys and values written to the
// cache, attention (sliding window and soft-capped scores where the layer
// has them), the output projection.
//
// Under tensor parallelism each rank holds its share of the heads (and of
// their KV); with fewer KV heads than ranks each rank holds a copy of the
// one its query heads read, as vLLM does. The output is then a partial sum.
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/layer_rows.h"
#include "model/model.h"
#include "model/weight_loader.h"

namespace kestrel {

// How a family's attention tensors look (its file says).
struct GqaOptions {
  bool qk_norm = false;    // attn_q_norm / attn_k_norm over each head (Qwen3, Gemma 3)
  bool fused_qkv = false;  // one attn_qkv: q rows, then k, then v (Phi-3); no biases
  bool sinks = false;      // attn_sinks: one logit per head in the softmax's denominator (gpt-oss)
  // Gemma 4: a weightless RMSNorm of each value head; the keys' projection taken for the values where the
  // file has no attn_v (attention_k_eq_v); a layer without keys and values of its own (it reads an earlier
  // layer's cache: q, its norm and RoPE only — any k/v tensors the file still has skipped by name).
  bool v_norm = false;
  bool v_from_k = false;
  bool no_kv = false;
  // Qwen3-Next / Qwen3.5: attn_q gives each head's query and then its gate (2 * head_dim rows per head); the
  // attention's output is multiplied by sigmoid(gate). One process only (the rows interleave by head).
  bool q_gate = false;
};

// The heads this rank runs (all of them in one process).
struct GqaHeads {
  int n_head = 0, n_head_kv = 0;
  int kv_head = -1;  // >= 0: the one KV head this rank holds a copy of (fewer KV heads than ranks)
};
GqaHeads split_gqa_heads(const ModelConfig& c, const TensorShard& shard);

// The cache of layers [first, end) for these heads (sliding-window layers marked).
KvLayout gqa_kv_layout(const ModelConfig& c, const GqaHeads& heads, int first, int end);

struct GqaWeights {
  Weight wq, wk, wv, wo;
  std::vector<float> bq, bk, bv;      // empty: no bias
  std::vector<float> q_norm, k_norm;  // per head (qk_norm)
  std::vector<float> bo;              // attn_output.bias (added by tensor rank 0 alone); empty: none
  std::vector<float> sinks;           // this rank's heads' sink logits (GqaOptions::sinks)
  bool v_norm = false;                // GqaOptions::v_norm
  bool q_gate = false;                // GqaOptions::q_gate: wq holds [query | gate] per head
  // No wk (GqaOptions::no_kv): the layer writes nothing and attends over the cache layer its LayerRows name.
  bool reads_only() const { return !wk.present(); }
};

// `{prefix}attn_{q,k,v,output}` (or attn_qkv), this rank's heads of them; the biases where the file has
// them.
GqaWeights load_gqa(const WeightLoader& ld, Backend& be, const std::string& prefix, const ModelConfig& c,
                    const GqaHeads& heads, const TensorShard& shard, const GqaOptions& o);

// Llama 3's rope_freqs: per-pair RoPE frequency divisors (empty: the file has none).
std::vector<float> load_rope_freqs(const WeightLoader& ld, const ModelConfig& c);
// Phi-3's LongRoPE factors: the long ones when the model runs beyond its
// original context (n_ctx; 0: the training context), as llama.cpp chooses them.
std::vector<float> load_longrope_factors(const WeightLoader& ld, const ModelConfig& c, int64_t n_ctx);
// Points both RoPE settings of c at the factors (when there are any), after checking them.
void use_rope_factors(ModelConfig& c, const std::vector<float>& factors);

// --log-fusion for a GQA family: how many of its layers have fused q/k/v
// projections and a fused gated FFN (`ffn`: "SwiGLU", "GeGLU", ...).
void print_gqa_fusion(int fused_qkv, int fused_ffn, int n_layer, bool qk_norm, const std::string& ffn);

// Scratch for the largest batch, and the block itself.
class GqaAttention {
 public:
  GqaAttention(Backend& be, const ModelConfig& c, const GqaHeads& heads, int64_t max_rows);
  // out (r.n rows of n_embd) = attention of the normed rows xb . Wo, over the cache layer r.kv_layer (the
  // layer's own, or the one it reads: GqaWeights::reads_only).
  void run(Backend& be, const GqaWeights& w, const LayerRows& r, Act xb, Act out);
  // Whether the backend fuses this layer's q, k, v projections (--log-fusion).
  static bool fused(const Backend& be, const GqaWeights& w) { return be.fuses(w.wq, w.wk) && be.fuses(w.wq, w.wv); }

 private:
  const ModelConfig& c_;
  GqaHeads heads_;
  ActBuffer q_, k_, v_, att_;
  ActBuffer qg_, gate_;  // q_gate layers: the projection's [query | gate] rows, and the gates (made on first use)
  int64_t max_rows_ = 0;
  void project_gated(Backend& be, const GqaWeights& w, const LayerRows& r, Act xb);
  // RoPE of x's rows (heads of head_dim): by positions, or by the rows' M-RoPE positions where the batch has them;
  // from_pass 1 when the temporal pass already ran (fused into qkv_rope).
  void rope(Backend& be, Act x, const LayerRows& r, int heads, const RopeParams& rope, int from_pass = 0);
  RopeParams mrope_pass(const RopeParams& rope, int pass) const;
  std::vector<float> mrope_ff_[3];  // per pass, each pair's frequency divisor: its own, or infinity (no turn)
  std::vector<float> ones_;  // a weightless norm's weights
};

}  // namespace kestrel

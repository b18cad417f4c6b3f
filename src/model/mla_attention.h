#pragma once
// Multi-head latent attention (DeepSeek-V2/V3), the block a layer with MLA
// calls (model/arch/deepseek2.cpp):
//   q = h.Wq  or  rmsnorm(h.Wq_a).Wq_b          per head: [nope | rope]
//   c, k_pe = h.Wkv_a                           latent (kv_lora) and shared rotary key
//   rope(q_pe, k_pe) ; kv[pos] = [rmsnorm(c) | k_pe]          the latent cache
//   o = attention (absorbed or decompressed, below) . Wo
// Attention of query head h over cached latents c_j:
//   absorbed:     score = ([Wk_b,h . q_nope,h | q_pe,h]) . [c_j | k_pe,j],
//                 o_h = Wv_b,h . sum_j p_j c_j
//                 (one shared "KV head" of kv_lora + rope dims: what decode reads)
//   decompressed: k_j,h = [Wk_b,h^T c_j | k_pe,j], v_j,h = Wv_b,h c_j, then
//                 plain multi-head attention (fewer FLOPs for long prompts)
// Both give the same result up to rounding; a cost model picks per step.
// Under tensor parallelism each rank holds its share of the query heads; the
// latent cache, shared by all heads, is whole on every rank.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "model/layer_rows.h"
#include "model/model.h"
#include "model/weight_loader.h"

namespace kestrel {

// This rank's query heads: [h0, h0 + n).
struct MlaHeads {
  int n = 0, h0 = 0;
};
MlaHeads split_mla_heads(const ModelConfig& c, const TensorShard& shard);

// The query temperature of position p (MlaConfig::temp_scale; 1 at positions below temp_length).
float mla_query_temperature(const MlaConfig& m, int32_t p);

// The latent cache of n_layers layers: per token [rmsnorm(c) | k_pe]; values
// are the first kv_lora floats of the same row, so there is no separate V.
KvLayout mla_kv_layout(const ModelConfig& c, int n_layers);

struct MlaWeights {
  Weight wq, wq_a, wq_b;  // wq (no query compression) or wq_a + wq_b
  std::vector<float> q_a_norm, kv_a_norm;
  Weight wkv_a;           // [kv_lora + rope rows]
  // Per head: k_absorb[h] = attn_k_b,h [kv_lora rows][nope cols] (absorbs into
  // the query), k_decompress[h] [nope rows][kv_lora cols] (rebuilds keys),
  // v[h] = attn_v_b,h [v_head rows][kv_lora cols].
  std::vector<Weight> k_absorb, k_decompress, v;
  std::vector<std::vector<float>> owned;  // f32 transposes behind some of those
  Weight wo;
};

// `{prefix}attn_*`: queries (compressed or not), the latent projection, the
// per-head key/value up-projections (split attn_k_b + attn_v_b, or the older
// fused attn_kv_b), the output; this rank's heads of them.
MlaWeights load_mla(const WeightLoader& ld, Backend& be, const std::string& prefix, const ModelConfig& c,
                    const MlaHeads& heads, const TensorShard& shard);

class MlaBlock {
 public:
  MlaBlock(Backend& be, const ModelConfig& c, const MlaHeads& heads, MlaAttention mode, int64_t max_rows);
  // Chooses how this step attends (the options' mode, or the cheaper one by
  // multiply-adds under Auto); run() then uses it.
  void begin_step(const Batch& b, const BatchPlacement& place);
  // out (r.n rows of n_embd) = MLA attention of the normed rows xb . Wo.
  void run(Backend& be, const MlaWeights& w, const LayerRows& r, Act xb, Act out);
  const char* mode_name() const;

 private:
  void project_qkv(Backend& be, const MlaWeights& w, const LayerRows& r, Act xb);
  void write_latents(Backend& be, const MlaWeights& w, const LayerRows& r);
  void attend_absorbed(Backend& be, const MlaWeights& w, const LayerRows& r);
  void attend_decompressed(Backend& be, const MlaWeights& w, const LayerRows& r);
  void attend_sequence(Backend& be, const MlaWeights& w, const LayerRows& r, const int32_t* table);
  void apply_temperature(Backend& be, const int32_t* positions, int64_t n, Act q, int64_t stride, int64_t width);
  int head_k() const { return c_.mla.qk_nope + c_.mla.qk_rope; }

  const ModelConfig& c_;
  MlaHeads heads_;
  MlaAttention mode_;
  bool decompress_ = false;  // this step's choice
  int64_t kv_width_ = 0;
  ActBuffer q_, q_a_, q_a_norm_, kv_a_, lat_, lat_norm_, kv_rows_, q_abs_, att_lat_, att_;
  // The decompressed path's buffers grow with the context (it runs for prefill only).
  std::vector<int64_t> seq_tokens_;
  ActBuffer dec_rows_, dec_lat_, dec_k_, dec_v_, dec_q_, dec_out_;
  std::vector<int32_t> dec_pos_;
};

}  // namespace kestrel

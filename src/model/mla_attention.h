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
// DeepSeek Sparse Attention (V3.2, c.mla.indexer): a lightning indexer per layer,
//   iq = rope_neox(rmsnorm(h.Wq_a) . Wiq_b)  per indexer head [rope | rest], then Hadamard-rotated
//   ik = rope_neox(layernorm(h.Wik))        one head, Hadamard-rotated, cached beside the latent
//   iw = h.Wiproj / sqrt(head_dim * n_head)
// scores every earlier position (ops/lightning_indexer.h) and each query attends (absorbed) only to
// its top_k positions. The indexer keys are the cache's second row per token (KvLayout v_width), in the
// same blocks and the same --kv-type as the latents; rows below top_k positions attend to all, unscored.
// Under tensor parallelism each rank holds its share of the query heads; the
// latent cache, shared by all heads, is whole on every rank.
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/layer_rows.h"
#include "model/model.h"
#include "model/weight_loader.h"

namespace kestrel {

// This rank's query heads: [h0, h0 + n).
struct MlaHeads {
  int n = 0, h0 = 0;
};
MlaHeads split_mla_heads(const ModelConfig& c, const TensorShard& shard);


// The latent cache of n_layers layers: per token [rmsnorm(c) | k_pe]; values
// are the first kv_lora floats of the same row, so there is no separate V.
// With an indexer the V row holds the indexer key.
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
  // The lightning indexer (c.mla.indexer; absent in dense-attention blocks such as V3.2's MTP block):
  // idx_q_b [n_head * head_dim rows] from the normed compressed query, idx_k [head_dim rows] and idx_proj
  // [n_head rows] from the layer's input, idx_k's LayerNorm weight and bias.
  Weight idx_q_b, idx_k, idx_proj;
  std::vector<float> idx_k_norm, idx_k_norm_b;
  bool indexed() const { return idx_q_b.present(); }
};

// `{prefix}attn_*`: queries (compressed or not), the latent projection, the
// per-head key/value up-projections (split attn_k_b + attn_v_b, or the older
// fused attn_kv_b), the output; this rank's heads of them. With c.mla.indexer,
// `{prefix}indexer.*` too (whole on every rank), or, when !indexer, skipped as unused.
MlaWeights load_mla(const WeightLoader& ld, Backend& be, const std::string& prefix, const ModelConfig& c,
                    const MlaHeads& heads, const TensorShard& shard, bool indexer = true);

// llama.cpp's Hadamard block size for the indexer's head size: the largest power of two >= 64 that
// divides it (0: none, the head size is not a multiple of 64).
int indexer_rotation_size(int head_dim);

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
  void write_latents(Backend& be, const MlaWeights& w, const LayerRows& r, Act idx_keys);
  void attend_absorbed(Backend& be, const MlaWeights& w, const LayerRows& r);
  void attend_decompressed(Backend& be, const MlaWeights& w, const LayerRows& r);
  void attend_sequence(Backend& be, const MlaWeights& w, const LayerRows& r, const int32_t* table);
  void apply_temperature(Backend& be, const int32_t* positions, int64_t n, Act q, int64_t stride, int64_t width);
  void absorb_queries(Backend& be, const MlaWeights& w, const LayerRows& r);
  // The indexer's keys of the rows (cached beside the latents); with queries, also its query heads and head
  // weights (needed only when a row is past top_k and selects).
  void index_keys(Backend& be, const MlaWeights& w, const LayerRows& r, Act xb, bool queries);
  void select_positions(Backend& be, const LayerRows& r);
  void split_rows(const LayerRows& r);
  void attend_sparse(Backend& be, const LayerRows& r);
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
  // The indexer's rows (query heads, key, head weights) and this step's selections.
  ActBuffer iq_, ik_, iw_;
  int hadamard_block_ = 0;
  RopeParams idx_rope_;
  std::vector<int32_t> selected_, counts_;
  std::vector<int64_t> dense_rows_, sparse_rows_;
  std::vector<int32_t> sub_pos_;
  std::vector<const int32_t*> sub_tables_;
  ActBuffer sel_rows_, sub_q_, sub_out_;  // a sparse row's gathered latents; a subset's queries and outputs
};

}  // namespace kestrel

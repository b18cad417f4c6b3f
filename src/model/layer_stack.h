#pragma once
// What every model shares, whatever its layer: the token embedding and the
// output head over the rows that asked for logits, placing a batch in the
// paged KV cache, this rank's layers and its share of the split dimensions
// (tensor, expert and pipeline parallelism), the strict load loop, scratch
// allocated once, pipeline stages and rank 0's steps in flight. An
// architecture (model/arch/<family>.cpp) derives from it and writes its
// layer — an attention branch and a feed-forward branch — from the shared
// blocks (gqa_attention.h, mla_attention.h, ffn_blocks.h). Per layer:
//
//   y = attention(rows)   summed over the ranks that split it    x = residual(x, y)
//   y = ffn(rows)         summed (over every expert group: MoE)   x = residual(x, y)
//
// Under tensor or expert parallelism a step's rows go in two halves, each
// half's sums in flight while the other half computes; under pipeline
// parallelism in micro-batches through the stages.
#include <cstdint>
#include <memory>
#include <vector>

#include "model/batch_io.h"
#include "model/ffn_blocks.h"
#include "model/layer_rows.h"
#include "model/model.h"
#include "parallel/pipeline_stage.h"
#include "model/weight_loader.h"

namespace kestrel {

// A DeepSeek-style multi-token-prediction block's own tensors (`nextn`): eh_proj over [enorm(embedding) |
// hnorm(hidden)], the embedding, head norm and head it reads (its own or the trunk's).
struct MtpTensors {
  Weight eh_proj, embed, head;
  std::vector<float> enorm, hnorm, head_norm;
};
// ...beside the block's own layer (the family's layer type).
template <class Layer>
struct MtpBlock : MtpTensors {
  Layer block;
};
// The `nextn` tensors of MTP block `layer`: the block's own embedding, head norm and head where the file has
// them (embed_tokens, shared_head_norm, shared_head_head), else io's.
MtpTensors load_mtp_tensors(const WeightLoader& ld, Backend& be, int layer, int64_t dim, int64_t n_vocab,
                            const IoWeights& io);

class LayerStack : public Model {
 public:
  const ModelConfig& config() const final { return cfg_; }
  int64_t max_batch_tokens() const final { return max_batch_; }
  void forward(const Batch& b, const BatchPlacement& place, KvStore& kv, float* logits, float* hidden) final;
  bool best_on_device() const override { return be_.best_on_device(); }
  std::vector<float> classify(const float* pooled) const override;
  void set_control_vector(std::shared_ptr<const ControlVector> cv) override;
  // Several residual streams (DeepSeek-V4) hand over the streams themselves, as llama.cpp's h_nextn.
  int64_t hidden_dim() const final { return streams_ > 1 ? state_dim() : cfg_.n_embd; }
  // Rank 0 of a pipeline keeps up to one step per stage in flight, each in
  // its own activations: stage 0 of step k+1 runs while step k is further on.
  int steps_in_flight() const final { return shard_.pipelined() && shard_.leader() ? shard_.stages : 1; }
  void start_forward(const Batch& b, const BatchPlacement& place, KvStore& kv, int slot) final;
  void finish_forward(int slot, float* logits) final;
  // A DeepSeek-style MTP block, when the family loaded one (nextn_, set by its load_extra): one cache layer after
  // the trunk's, and run_nextn_block as the MTP step, after the family's begin_step. (DeepSeek-V4 has its own.)
  int mtp_layers() const override { return nextn_ ? 1 : 0; }
  void forward_mtp(const Batch& b, const BatchPlacement& place, KvStore& kv, const float* hidden_in, float* logits,
                   float* hidden_out) override;

  // The second half of construction, once the family's own members exist
  // (its factory calls it once): the family's tensors (load_extra, then
  // load_layer for each of this rank's layers, the others' skipped), a load
  // error naming any tensor left over, then scratch for the largest batch.
  void init(const GgufFile& f, const ModelOptions& opt);

 protected:
  enum class Branch { Attention, Ffn };

  LayerStack(Backend& be, const ModelOptions& opt, ModelConfig cfg);

  // ---- What a family writes ----
  virtual void load_layer(const WeightLoader& ld, int layer) = 0;
  // Tensors outside the layers: RoPE frequency factors, MTP blocks.
  virtual void load_extra(const WeightLoader& /*ld*/, const ModelOptions& /*opt*/) {}
  // Whether load_extra takes the MTP block from ModelOptions::mtp_file (DeepSeek-V4); others refuse one.
  virtual bool reads_mtp_file() const { return false; }
  // The family's scratch for steps of up to max_rows rows.
  virtual void allocate(int64_t max_rows) = 0;
  // Once per step, before its first layer: choices made for the whole step.
  virtual void begin_step(const Batch& /*b*/, const BatchPlacement& /*place*/) {}
  // The layer's attention branch over the rows' activations (x(r)), into y
  // (r.n rows of n_embd): a partial sum under tensor parallelism.
  virtual void attention(const LayerRows& r, Act y) = 0;
  // Its feed-forward branch likewise (this rank's FFN rows or experts).
  virtual void ffn(const LayerRows& r, Act y) = 0;
  // x += y after a branch (Gemma normalizes y first; DeepSeek-V4 spreads y over its streams): the rows
  // [r0, r0 + n) of the batch.
  virtual void residual(int layer, Branch branch, Act x, Act y, int64_t r0, int64_t n);
  // The rows' states folded into the n_embd rows the output head reads (DeepSeek-V4's hyper-connection
  // head; others: the states themselves), n rows of x.
  virtual Act head_input(Act x, int64_t /*n*/) { return x; }
  // --log-fusion: which fused operators run for this family's weights.
  virtual void log_fusion() const {}

  // ---- What the stack gives a family ----
  Act x(const LayerRows& r) const { return x_ + r.r0 * state_dim(); }
  // Floats of one row's state between layers: n_embd, times the residual streams (DeepSeek-V4's
  // hyper-connections keep several; a family sets streams_ in its constructor).
  int64_t state_dim() const { return cfg_.n_embd * streams_; }
  // RMSNorm of the rows' activations by weight, into the normed-input scratch (returned).
  Act norm_rows(const LayerRows& r, const std::vector<float>& weight);
  // Whether layer's FFN is a mixture of experts (its sum then spans the expert groups).
  bool moe_layer(int layer) const {
    return cfg_.moe.routing.n_expert > 0 && layer >= cfg_.moe.n_dense_lead && (layer + 1) % cfg_.moe.layer_step == 0;
  }
  // The FFN of xb's n rows into y: the experts when moe is present, else the dense FFN.
  void feed_forward(const FfnWeights& dense, const MoeWeights& moe, FfnActivation act, Act xb, int64_t n, Act y,
                    const int32_t* tokens = nullptr, Act router_in = {});
  // One layer over the rows, branches and sums one after another (what the
  // MTP block runs too).
  void run_layer(const LayerRows& r);
  void check_batch_size(int64_t n) const;
  // Rows [r0, r0 + n) of the batch embedded by table into the activations.
  void embed_rows(const Weight& table, const Batch& b, int64_t r0, int64_t n);
  // Batch rows [r0, r0 + n) of x (rows of n_embd) that are media rows (Batch::embd_rows) become those rows.
  void copy_media_rows(const Batch& b, Act x, int64_t r0, int64_t n);
  // Norm + output projection of x's rows that want logits, into host logits
  // (and every row's state of hidden_dim() into host hidden, when set: normed, or the streams).
  void head(const Batch& b, Act x, const std::vector<float>& norm, const Weight& output, float* logits,
            float* hidden);
  // The same over rows already folded into n_embd (what head_input gives; DeepSeek-V4's MTP block folds its
  // streams by its own hyper-connection head), their normed state into hidden when set.
  void head_rows(const Batch& b, Act rows, const std::vector<float>& norm, const Weight& output, float* logits,
                 float* hidden);
  // A layer's weights prefix, "blk.N.".
  static std::string layer_prefix(int layer);
  // A DeepSeek-style MTP block (deepseek2, glm4moe, the Qwen hybrids; see Model::forward_mtp). Its step: each row's token
  // embedded by m.embed beside its hidden_in row, [enorm(e) | hnorm(h)] through eh_proj, the block (layer
  // n_layer, the family's own layer code) run, its output into hidden_out (when set), logits by m's head
  // norm and head; in scratch a family allocates (allocate_nextn, from its allocate()) when it loaded one.
  void run_nextn_block(const Batch& b, const BatchPlacement& place, KvStore& kv, const MtpTensors& m,
                       const float* hidden_in, float* logits, float* hidden_out);
  void allocate_nextn(int64_t max_rows);
  // The file's MTP blocks past those this model loaded (mtp_layers()), skipped by name.
  void skip_unloaded_mtp(const WeightLoader& ld) const;
  // The first MTP block (blk.{n_layer}) when the options ask for one: its layer (load_block(layer), the
  // family's) and its `nextn` tensors, then the blocks not loaded skipped by name. The block returned is the
  // one forward_mtp runs (null: none loaded).
  template <class Layer, class LoadBlock>
  std::unique_ptr<MtpBlock<Layer>> load_nextn_block(const WeightLoader& ld, const ModelOptions& o,
                                                    LoadBlock&& load_block) {
    std::unique_ptr<MtpBlock<Layer>> m;
    if (o.load_mtp && cfg_.n_mtp > 0) {
      m = std::make_unique<MtpBlock<Layer>>();
      m->block = load_block(cfg_.n_layer);
      static_cast<MtpTensors&>(*m) = load_mtp_tensors(ld, be_, cfg_.n_layer, cfg_.n_embd, cfg_.n_vocab, io_);
      nextn_ = m.get();
    }
    skip_unloaded_mtp(ld);
    return m;
  }

  ModelConfig cfg_;
  Backend& be_;
  const int64_t max_batch_;
  const TensorShard shard_;
  int first_ = 0, end_ = 0;  // this rank's layers (all of them in one process)
  int streams_ = 1;          // residual streams per row (state_dim)
  std::shared_ptr<const ControlVector> cvec_;  // set_control_vector's (null: none)
  MoeConfig local_moe_;      // the expert widths this rank runs (its share under tp)
  int64_t local_n_ff_ = 0;   // ...and of a dense FFN's rows
  IoWeights io_;
  std::vector<float> classifier_;  // a reranker's cls.output, [labels][n_embd] (pooling rank)
  const MtpTensors* nextn_ = nullptr;  // the MTP block the family loaded for forward_mtp (null: none)
  Act x_;  // the activations being computed: x_store_, or a step in flight's

 private:
  void load(const GgufFile& f, const ModelOptions& opt);
  void allocate_stack();
  void embed(const Batch& b, int64_t r0, int64_t n) { embed_rows(io_.tok_embd, b, r0, n); }
  // Rows [r0, r0 + n) of the batch through this rank's layers, x in place.
  void run_layers(const Batch& b, const BatchPlacement& place, KvStore& kv, int64_t r0, int64_t n);
  void run_layers_overlapped(const Batch& b, const BatchPlacement& place, KvStore& kv, int64_t r0, int64_t n);
  LayerRows rows_of(const Batch& b, const BatchPlacement& place, KvStore& kv, int layer, int64_t r0, int64_t n) const {
    return {b, place, kv, layer, layer - first_, r0, n};
  }
  // Transfers in flight move on only inside MPI calls: between operators.
  void progress();
  // A buffer's host memory for the ranks' transfers (null in one process:
  // nothing is sent, and the backend's memory is never mapped).
  float* comm(Act a, int64_t n) { return shard_.distributed() ? be_.map(a, n) : nullptr; }
  // The rows the last MoE layer run computed on this rank.
  const uint8_t* touched() const { return moe_ ? moe_->touched() : nullptr; }
  static int64_t micro_batches(int64_t n);

  std::unique_ptr<MoeFfn> moe_;                // scratch of the MoE layers
  std::unique_ptr<ExpertCombine> combine_[2];  // one per half of an overlapped step (--parallel-expert-sum all-to-all)
  ActBuffer x_store_, xb_, y_, hb_, hb2_;
  // Best-candidate steps' logits rows (kBestChunk at a time, on the backend) and their best (Batch::best).
  static constexpr int64_t kBestChunk = 32;
  ActBuffer best_rows_;
  ActBuffer nextn_e_, nextn_h_, nextn_cat_;  // run_nextn_block: the normed embedding and hidden rows, [e | h]
  StepSlots in_flight_;  // rank 0's steps in flight under pp
};

}  // namespace kestrel

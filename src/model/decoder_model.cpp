// The decoder layer of the Llama-derived families — Llama, Mistral, Mixtral,
// Qwen2/2.5/3 (dense and MoE), Phi-3, Gemma 2/3 — top to bottom. What a
// family turns on is in its ModelConfig (read by model/arch/*.cpp):
//   x = embed(tokens) [* sqrt(n_embd): Gemma]
//   for each layer:
//     h = rmsnorm(x)
//     q, k, v = h.Wq, h.Wk, h.Wv [+ biases] [per-head rmsnorm of q, k] ; rope(q, k)
//     kv[pos] = k, v
//     a = attention(q, kv) [last W positions on sliding layers] [soft-capped scores] . Wo
//     x += a [rmsnorm'd first: Gemma's post norms]
//     h = rmsnorm(x)
//     f = act(h.Wgate) * (h.Wup) . Wdown      (SwiGLU, or GeGLU for Gemma)
//         or the routed experts' weighted sum [+ shared expert, gated]   (MoE)
//     x += f [rmsnorm'd first: Gemma]
//   logits = rmsnorm(x) . Wout [soft-capped: Gemma 2]    (only for rows that asked)
//
// Split over ranks (ModelOptions::shard, tensor parallelism), each rank holds
// its share of the heads (and their KV), of the FFN rows and of every
// expert's rows; the attention output and the FFN output are partial sums
// until summed across the ranks, which is where the ranks meet, twice a layer.
// Split into pipeline stages, each rank runs a range of the layers on the
// activations the previous stage sends it, in micro-batches so that the
// stages work at once; the last stage sends the result back to rank 0.
#include "model/decoder_model.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "model/batch_io.h"
#include "model/ffn_blocks.h"
#include "model/pipeline_stage.h"
#include "model/weight_loader.h"

namespace kestrel {
namespace {

struct DecoderLayer {
  std::vector<float> attn_norm, ffn_norm, post_attn_norm, post_ffn_norm;
  std::vector<float> q_norm, k_norm;  // per head (Qwen3, Gemma 3)
  std::vector<float> bq, bk, bv;      // empty: no bias
  Weight wq, wk, wv, wo;
  FfnWeights ffn;  // dense
  MoeWeights moe;  // or experts
};

class DecoderModel final : public Model {
 public:
  DecoderModel(const GgufFile& f, Backend& be, const ModelOptions& opt, ModelConfig cfg)
      : cfg_(std::move(cfg)), be_(be), max_batch_(opt.max_batch_tokens), shard_(opt.shard), place_(opt.max_batch_tokens) {
    split_dimensions();
    load(f, opt);
    allocate();
    if (opt.log_fusion) log_fusion();
  }

  const ModelConfig& config() const override { return cfg_; }
  KvLayout kv_layout() const override {
    const int64_t kv_dim = static_cast<int64_t>(local_.n_head_kv) * cfg_.head_dim;
    // This stage's layers only (all of them in one process).
    KvLayout l{end_ - first_, kv_dim, kv_dim, cfg_.head_dim};
    l.sliding_window = cfg_.sliding_window;
    for (int i = first_; i < end_ && !cfg_.sliding_layers.empty(); i++) l.sliding.push_back(cfg_.is_sliding(i));
    return l;
  }
  int64_t max_batch_tokens() const override { return max_batch_; }

  void forward(const Batch& b, PagedKvCache& kv, float* logits, float* hidden) override {
    if (b.size() == 0) return;
    check_batch_size(b);
    place_batch(b, kv, cfg_.n_vocab, place_);
    forward_placed(b, place_, kv.store(), logits, hidden);
  }

  void forward_placed(const Batch& b, const BatchPlacement& place, KvStore& kv, float* logits, float* hidden) override {
    const int64_t n = b.size();
    if (n == 0) return;
    check_batch_size(b);
    if (!shard_.pipelined()) {
      embed_rows(b, 0, n);
      run_layers(b, place, kv, 0, n);
    } else {
      run_stage(b, place, kv);
      if (shard_.stage != 0) return;
    }

    // Norm + output projection on the rows that want logits only.
    if (!logits && !hidden) return;  // a tensor-parallel rank that does not sample
    head(b, x_, logits, hidden);
  }

  // Rank 0 of a pipeline keeps up to one step per stage in flight, each in
  // its own activations: stage 0 of step k+1 runs while step k is further on.
  int steps_in_flight() const override { return shard_.pipelined() && shard_.leader() ? shard_.stages : 1; }

  void start_forward_placed(const Batch& b, const BatchPlacement& place, KvStore& kv, int slot) override {
    check_batch_size(b);
    in_flight_.start(
        shard_, slot, b, cfg_.n_embd, micro_batches(b.size()), x_,
        [&](int64_t r0, int64_t rows) { embed_rows(b, r0, rows); },
        [&](int64_t r0, int64_t rows) { run_layers(b, place, kv, r0, rows); });
  }

  void finish_forward_placed(int slot, float* logits) override {
    const auto [b, back] = in_flight_.finish(shard_, slot);
    if (logits) head(*b, back, logits, nullptr);  // (null: a step drained at the end)
  }

 private:
  // Norm + output projection of x's rows that want logits.
  void head(const Batch& b, float* x, float* logits, float* hidden) {
    const ModelConfig& c = cfg_;
    output_logits(be_, b, x, c.n_embd, w_.io.output_norm.data(), c.rms_eps, w_.io.output, xb_.data(), logits, hidden);
    if (c.final_softcap > 0.0f) be_.softcap(logits, b.n_logit_rows() * c.n_vocab, c.final_softcap);
  }

  void embed_rows(const Batch& b, int64_t r0, int64_t n) {
    float* x = x_ + r0 * cfg_.n_embd;
    be_.annotate_layer(-1);
    be_.embed(w_.io.tok_embd, b.tokens.data() + r0, n, x);
    if (cfg_.embed_scale != 1.0f) be_.scale(x, n * cfg_.n_embd, cfg_.embed_scale);
  }

  // This pipeline stage's part of the step, in micro-batches of rows.
  void run_stage(const Batch& b, const BatchPlacement& place, KvStore& kv) {
    run_pipeline_stage(
        shard_, x_, b.size(), cfg_.n_embd, micro_batches(b.size()),
        [&](int64_t r0, int64_t rows) { embed_rows(b, r0, rows); },
        [&](int64_t r0, int64_t rows) { run_layers(b, place, kv, r0, rows); });
  }

  // Rows [r0, r0 + n) of the batch through this rank's layers, x in place.
  void run_layers(const Batch& b, const BatchPlacement& place, KvStore& kv, int64_t r0, int64_t n) {
    if (shard_.overlap && (shard_.split() || shard_.experts_split()) && n >= 2)
      return run_layers_overlapped(b, place, kv, r0, n);
    const int64_t dim = cfg_.n_embd;
    float *x = x_ + r0 * dim, *y = xb2_.data();
    for (int l = first_; l < end_; l++) {
      const DecoderLayer& L = w_.layers[l - first_];
      be_.annotate_layer(l);
      attention_block(L, l, b, place, kv, r0, n, y);
      shard_.sum(y, n * dim);
      residual(L.post_attn_norm, x, y, n);
      ffn_block(L, r0, n, y);
      shard_.sum_ffn(y, n, dim, L.moe.present(), combine_[0].get(), touched());
      residual(L.post_ffn_norm, x, y, n);
    }
  }

  // The same in two halves of the rows, each half's sums in flight while
  // the other half computes: attention of half 1 hides the sum of half 0's
  // attention, and so on through the FFNs and into the next layer. Half 1's
  // attention reads the keys half 0 wrote in the same layer just before.
  void run_layers_overlapped(const Batch& b, const BatchPlacement& place, KvStore& kv, int64_t r0, int64_t n) {
    const int64_t dim = cfg_.n_embd;
    const int64_t first[2] = {r0, r0 + n / 2}, rows[2] = {n / 2, n - n / 2};
    float* x[2] = {x_ + first[0] * dim, x_ + first[1] * dim};
    float* y[2] = {xb2_.data() + first[0] * dim, xb2_.data() + first[1] * dim};
    TensorShard::PendingSum attn[2], ffn[2];
    for (int l = first_; l < end_; l++) {
      const DecoderLayer& L = w_.layers[l - first_];
      be_.annotate_layer(l);
      for (int h = 0; h < 2; h++) {
        if (l > first_) {
          TensorShard::finish(ffn[h]);
          residual(w_.layers[l - 1 - first_].post_ffn_norm, x[h], y[h], rows[h]);
        }
        progress();
        attention_block(L, l, b, place, kv, first[h], rows[h], y[h]);
        attn[h] = shard_.start_sum(y[h], rows[h] * dim, false);
      }
      for (int h = 0; h < 2; h++) {
        TensorShard::finish(attn[h]);
        residual(L.post_attn_norm, x[h], y[h], rows[h]);
        progress();
        ffn_block(L, first[h], rows[h], y[h]);
        ffn[h] = shard_.start_ffn_sum(y[h], rows[h], dim, L.moe.present(), combine_[h].get(), touched());
      }
    }
    for (int h = 0; h < 2; h++) {
      TensorShard::finish(ffn[h]);
      residual(w_.layers[end_ - 1 - first_].post_ffn_norm, x[h], y[h], rows[h]);
    }
  }

  // Norm of rows [r0, r0 + n) and self-attention, into y (partial under tp).
  void attention_block(const DecoderLayer& L, int l, const Batch& b, const BatchPlacement& place, KvStore& kv,
                       int64_t r0, int64_t n, float* y) {
    be_.rmsnorm(x_ + r0 * cfg_.n_embd, L.attn_norm.data(), xb_.data(), n, cfg_.n_embd, cfg_.rms_eps);
    attention(L, l, b, place, kv, r0, n, y);
  }

  // Norm of rows [r0, r0 + n) and the FFN or experts, into y (partial under tp/ep).
  void ffn_block(const DecoderLayer& L, int64_t r0, int64_t n, float* y) {
    float* xb = xb_.data();
    be_.rmsnorm(x_ + r0 * cfg_.n_embd, L.ffn_norm.data(), xb, n, cfg_.n_embd, cfg_.rms_eps);
    if (L.moe.present())
      moe_->run(be_, L.moe, xb, n, y);
    else
      run_ffn(be_, L.ffn, cfg_.ffn_act, xb, n, hb_.data(), hb2_.data(), y);
  }

  // Transfers in flight move on only inside MPI calls: between operators.
  void progress() {
    shard_.progress();
    for (auto& combine : combine_)
      if (combine) combine->progress();
  }

  // The rows the last MoE layer run computed on this rank.
  const uint8_t* touched() const { return moe_ ? moe_->touched() : nullptr; }

  // x += y, y normed first where the family has post norms (Gemma 2/3).
  void residual(const std::vector<float>& post_norm, float* x, float* y, int64_t n) {
    if (cfg_.post_norms) be_.rmsnorm(y, post_norm.data(), y, n, cfg_.n_embd, cfg_.rms_eps);
    be_.add(x, y, n * cfg_.n_embd);
  }

  void check_batch_size(const Batch& b) const {
    if (b.size() > max_batch_)
      throw Error(fmt::format("batch of {} tokens exceeds the planned maximum {}", b.size(), max_batch_));
  }

  // This rank's heads and FFN rows (all of them in one process); checked
  // before any weight is read, so that a split that cannot be made says so.
  void split_dimensions() {
    const ModelConfig& c = cfg_;
    if (shard_.stages > c.n_layer)
      throw Error(fmt::format("pipeline parallelism over {} stages: the model has only {} layers", shard_.stages,
                              c.n_layer));
    first_ = shard_.first_layer(c.n_layer);
    end_ = shard_.end_layer(c.n_layer);
    local_.n_head = static_cast<int>(shard_.share(c.n_head, "attention heads"));
    // Fewer KV heads than ranks (GQA, MQA): each KV head is held by the ranks
    // whose query heads read it, as vLLM does; else they split like the rest.
    if (c.n_head_kv < shard_.n && shard_.n % c.n_head_kv == 0) {
      local_.n_head_kv = 1;
      local_.kv_head = shard_.rank / (shard_.n / c.n_head_kv);
    } else {
      local_.n_head_kv = static_cast<int>(shard_.share(c.n_head_kv, "KV heads"));
      local_.kv_head = -1;
    }
    if (shard_.experts_split() && c.moe.routing.n_expert == 0)
      throw Error(fmt::format("expert parallelism (ep={}) needs a mixture-of-experts model; {} is dense (use tp)",
                              shard_.ep, c.arch));
    local_.moe = split_moe_widths(c.moe, shard_);
    if (c.moe.routing.n_expert == 0) local_.n_ff = shard_.share(c.n_ff, "FFN rows");
  }

  // Self-attention of layer l over xb (normed), into out (a partial sum
  // under tensor parallelism: this rank's heads only), for rows [r0, r0 + n).
  void attention(const DecoderLayer& L, int l, const Batch& b, const BatchPlacement& place, KvStore& kv, int64_t r0,
                 int64_t n, float* out) {
    const int kl = l - first_;  // the layer's place in this stage's cache
    const ModelConfig& c = cfg_;
    const int64_t kv_dim = static_cast<int64_t>(local_.n_head_kv) * c.head_dim;
    float *q = q_.data(), *k = k_.data(), *v = v_.data();
    const Weight* qkv[3] = {&L.wq, &L.wk, &L.wv};
    const float* bias[3] = {L.bq.empty() ? nullptr : L.bq.data(), L.bk.empty() ? nullptr : L.bk.data(),
                            L.bv.empty() ? nullptr : L.bv.data()};
    float* qkv_out[3] = {q, k, v};
    Backend::QkvShape shape{local_.n_head, local_.n_head_kv, c.head_dim};
    if (c.qk_norm) shape.q_norm = L.q_norm.data(), shape.k_norm = L.k_norm.data(), shape.norm_eps = c.rms_eps;
    const int32_t* positions = b.positions.data() + r0;
    be_.qkv_rope(qkv, bias, xb_.data(), n, positions, c.rope_of(l), shape, qkv_out);
    const int g = kv.group_of(kl);
    const int64_t* slots = place.slots[g].data() + r0;
    for (int64_t i = 0; i < n; i++) {
      kv.write_k(kl, slots[i], k + i * kv_dim);
      kv.write_v(kl, slots[i], v + i * kv_dim);
    }
    AttentionShape as{local_.n_head, local_.n_head_kv, c.head_dim};
    as.scale = c.attn_scale > 0.0f ? c.attn_scale : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    as.window = c.window(l);
    as.softcap = c.attn_softcap;
    be_.attention(kv.layer_view(kl), {n, q, att_.data(), positions, place.tables[g].data() + r0}, as);
    be_.matmul(L.wo, att_.data(), n, out);
  }

  void load(const GgufFile& f, const ModelOptions& opt) {
    const ModelConfig& c = cfg_;
    WeightLoader ld(f);
    w_.io = load_io_weights(ld, be_, c, shard_.leader(), shard_.stage == 0);
    load_rope_factors(ld, opt);
    for (int l = 0; l < c.n_layer; l++)
      if (l >= first_ && l < end_)
        w_.layers.push_back(load_layer(ld, l));
      else
        ld.skip_prefix(fmt::format("blk.{}.", l), "pipeline parallelism: another stage's layer");
    ld.finish(c.arch);
  }

  // Per-pair RoPE frequency divisors: Llama 3's rope_freqs, or Phi-3's
  // LongRoPE factors, the long ones only beyond the original context (as
  // llama.cpp chooses them, by the context the model runs at).
  void load_rope_factors(const WeightLoader& ld, const ModelOptions& opt) {
    ModelConfig& c = cfg_;
    const int64_t pairs = c.rope.n_rot / 2;
    if (ld.has("rope_freqs.weight")) {
      rope_factors_ = ld.require_vector("rope_freqs.weight", pairs);
    } else if (ld.has("rope_factors_short.weight") || ld.has("rope_factors_long.weight")) {
      const int64_t n_ctx = opt.n_ctx > 0 ? opt.n_ctx : c.n_ctx_train;
      const bool use_long = n_ctx > c.n_ctx_orig;
      const char* use = use_long ? "rope_factors_long.weight" : "rope_factors_short.weight";
      rope_factors_ = ld.require_vector(use, pairs);
      ld.skip(use_long ? "rope_factors_short.weight" : "rope_factors_long.weight",
              "LongRoPE: the other context range's factors");
    } else {
      return;
    }
    for (float ff : rope_factors_)
      if (!(ff > 0.0f) || !std::isfinite(ff))
        throw Error(fmt::format("RoPE frequency factor {} must be positive and finite", ff));
    c.rope.freq_factors = rope_factors_.data();
    c.rope_sliding.freq_factors = rope_factors_.data();
  }

  DecoderLayer load_layer(const WeightLoader& ld, int l) {
    const ModelConfig& c = cfg_;
    const int64_t dim = c.n_embd, hd = c.head_dim, q_dim = c.n_head * hd, kv_dim = c.n_head_kv * hd;
    const std::string p = fmt::format("blk.{}.", l);
    const TensorShard& sh = shard_;
    DecoderLayer L;
    L.attn_norm = ld.require_vector(p + "attn_norm.weight", dim);
    // Column-parallel by heads: this rank's run of q rows and of k and v rows.
    if (c.fused_qkv) {
      const Weight qkv = ld.require(p + "attn_qkv.weight", {dim, q_dim + 2 * kv_dim});
      L.wq = be_.prepare_weight(sh.rows(weight_rows(qkv, 0, q_dim, qkv.name + ".q")));
      L.wk = be_.prepare_weight(kv_rows(weight_rows(qkv, q_dim, kv_dim, qkv.name + ".k")));
      L.wv = be_.prepare_weight(kv_rows(weight_rows(qkv, q_dim + kv_dim, kv_dim, qkv.name + ".v")));
    } else {
      L.wq = be_.prepare_weight(sh.rows(ld.require(p + "attn_q.weight", {dim, q_dim})));
      L.wk = be_.prepare_weight(kv_rows(ld.require(p + "attn_k.weight", {dim, kv_dim})));
      L.wv = be_.prepare_weight(kv_rows(ld.require(p + "attn_v.weight", {dim, kv_dim})));
      L.bq = sh.part(ld.optional_vector(p + "attn_q.bias", q_dim), 0, q_dim);
      L.bk = kv_part(ld.optional_vector(p + "attn_k.bias", kv_dim));
      L.bv = kv_part(ld.optional_vector(p + "attn_v.bias", kv_dim));
    }
    if (c.qk_norm) {
      L.q_norm = ld.require_vector(p + "attn_q_norm.weight", hd);
      L.k_norm = ld.require_vector(p + "attn_k_norm.weight", hd);
    }
    // Row-parallel: the columns that read this rank's heads.
    L.wo = be_.prepare_weight(sh.columns(ld.require(p + "attn_output.weight", {q_dim, dim})));
    if (c.post_norms) {
      L.post_attn_norm = ld.require_vector(p + "post_attention_norm.weight", dim);
      L.post_ffn_norm = ld.require_vector(p + "post_ffw_norm.weight", dim);
    }
    L.ffn_norm = ld.require_vector(p + "ffn_norm.weight", dim);
    if (c.moe.routing.n_expert > 0)
      L.moe = load_moe(ld, be_, p, dim, c.moe, sh);
    else
      L.ffn = load_ffn(ld, be_, p, "", dim, c.n_ff, c.fused_gate_up, sh);
    return L;
  }

  // This rank's rows of a k or v matrix (and of its bias): its share of the
  // KV heads, or the one it holds a copy of.
  Weight kv_rows(const Weight& w) const {
    if (local_.kv_head < 0) return shard_.rows(w);
    const int64_t hd = cfg_.head_dim;
    return weight_rows(w, local_.kv_head * hd, hd, fmt::format("{}[KV head {}]", w.name, local_.kv_head));
  }
  std::vector<float> kv_part(const std::vector<float>& v) const {
    if (v.empty() || local_.kv_head < 0) return shard_.part(v, 0, static_cast<int64_t>(v.size()));
    const int64_t hd = cfg_.head_dim;
    return {v.begin() + local_.kv_head * hd, v.begin() + (local_.kv_head + 1) * hd};
  }

  // Scratch activations for the largest batch, allocated once.
  void allocate() {
    const ModelConfig& c = cfg_;
    const int64_t n = max_batch_;
    const int64_t q_dim = static_cast<int64_t>(local_.n_head) * c.head_dim;
    const int64_t kv_dim = static_cast<int64_t>(local_.n_head_kv) * c.head_dim;
    x_store_.resize(n * c.n_embd);
    x_ = x_store_.data();
    in_flight_.resize(steps_in_flight(), n * c.n_embd);
    xb_.resize(n * std::max(c.n_embd, q_dim));
    xb2_.resize(n * c.n_embd);
    q_.resize(n * q_dim);
    k_.resize(n * kv_dim);
    v_.resize(n * kv_dim);
    att_.resize(n * q_dim);
    if (c.moe.routing.n_expert > 0) {
      moe_ = std::make_unique<MoeFfn>(c.n_embd, local_.moe, n);
      if (shard_.combines_experts())
        for (auto& combine : combine_) combine = std::make_unique<ExpertCombine>(*shard_.experts_comm(), c.n_embd, n);
    } else {
      hb_.resize(n * local_.n_ff);
      hb2_.resize(n * local_.n_ff);
    }
  }

  // Says which fused operators the backend will run for these weights.
  void log_fusion() const {
    int qkv = 0, ffn = 0;
    for (const auto& L : w_.layers) {
      qkv += be_.fuses(L.wq, L.wk) && be_.fuses(L.wq, L.wv);
      const FfnWeights* f = L.moe.present() ? L.moe.first_held() : &L.ffn;
      ffn += f && be_.fuses(f->gate, f->up);
    }
    const int n = cfg_.n_layer;
    const char* act = cfg_.ffn_act == FfnActivation::Gelu ? "GeGLU" : "SwiGLU";
    fmt::print(stderr,
               "fusion: attn_q+attn_k+attn_v(+bias{})+RoPE: one activation preparation, one parallel pass in whole "
               "heads, the rest in the epilogue: {} of {} layers\n",
               cfg_.qk_norm ? "+q/k norm" : "", qkv, n);
    fmt::print(stderr, "fusion: ffn_gate+ffn_up+{}{}: one pass, the activation applied in the epilogue: {} of {} layers\n",
               act, moe_ ? " (each routed expert)" : "", ffn, n);
    fmt::print(stderr, "fusion: not fused: the residual adds, RMSNorm (its output is quantized once per fused pass)\n");
  }

  ModelConfig cfg_;
  Backend& be_;
  int64_t max_batch_;
  TensorShard shard_;
  int first_ = 0, end_ = 0;                      // this rank's layers (all of them in one process)
  static constexpr int64_t kMicroBatches = 4;    // a pipelined step's rows in at most this many parts
  // A micro-batch re-reads the stage's weights: fewer rows than this and a
  // step is bound by that reading, so splitting it costs more than the
  // stages' overlap saves (1.1B Q4_0, one core: 8 rows cost 1.6x one row, 16
  // rows 2.2x; decode at 8 requests, pp=2: TPOT 183 ms in 4 parts, 145 whole).
  static constexpr int64_t kMinMicroRows = 16;
  static int64_t micro_batches(int64_t n) { return std::clamp<int64_t>(n / kMinMicroRows, 1, kMicroBatches); }
  struct {  // what this rank runs of the split dimensions (the whole of them in one process)
    int n_head = 0, n_head_kv = 0;
    int kv_head = -1;  // >= 0: the one KV head this rank holds a copy of (fewer KV heads than ranks)
    int64_t n_ff = 0;
    MoeConfig moe;
  } local_;
  struct {
    IoWeights io;
    std::vector<DecoderLayer> layers;
  } w_;
  std::vector<float> rope_factors_;  // what cfg_.rope.freq_factors points at
  BatchPlacement place_;
  std::unique_ptr<MoeFfn> moe_;
  std::unique_ptr<ExpertCombine> combine_[2];  // one per half of an overlapped step (--parallel-expert-sum all-to-all)
  std::vector<float> x_store_, xb_, xb2_, q_, k_, v_, att_, hb_, hb2_;
  float* x_ = nullptr;   // the activations of the rows being computed: x_store_, or a step in flight's
  StepSlots in_flight_;  // rank 0's steps in flight under pp
};

}  // namespace

std::unique_ptr<Model> make_decoder_model(const GgufFile& file, Backend& backend, const ModelOptions& options,
                                          ModelConfig config) {
  return std::make_unique<DecoderModel>(file, backend, options, std::move(config));
}

}  // namespace kestrel

// The DeepSeek-V2/V3 layer (GGUF architecture `deepseek2`), top to bottom:
//   x = embed(tokens)
//   for each layer:
//     h = rmsnorm(x)
//     q = h.Wq  or  rmsnorm(h.Wq_a).Wq_b          per head: [nope | rope]
//     c, k_pe = h.Wkv_a                           latent (kv_lora) and shared rotary key
//     rope(q_pe, k_pe) ; kv[pos] = [rmsnorm(c) | k_pe]          the latent cache
//     o = MLA attention (absorbed or decompressed, below) ; x += o . Wo
//     h = rmsnorm(x)
//     x += dense SwiGLU FFN (leading layers)
//          or sum_k w_k * expert_k(h) + shared experts(h)   (DeepSeekMoE)
//   logits = rmsnorm(x) . Wout     (only for rows that asked)
//
// MLA attention of query head h over cached latents c_j:
//   absorbed:     score = ([Wk_b,h . q_nope,h | q_pe,h]) . [c_j | k_pe,j],
//                 o_h = Wv_b,h . sum_j p_j c_j
//                 (one shared "KV head" of kv_lora + rope dims: what decode reads)
//   decompressed: k_j,h = [Wk_b,h^T c_j | k_pe,j], v_j,h = Wv_b,h c_j, then
//                 plain multi-head attention (fewer FLOPs for long prompts)
// Both give the same result up to rounding; a cost model picks per step.
#include "model/deepseek2_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "formats/block_formats.h"
#include "core/error.h"
#include "model/batch_io.h"
#include "model/ffn_blocks.h"
#include "model/pipeline_stage.h"
#include "model/weight_loader.h"

namespace kestrel {
namespace {

struct Deepseek2Layer {
  std::vector<float> attn_norm, q_a_norm, kv_a_norm, ffn_norm;
  Weight wq, wq_a, wq_b;  // wq (no query compression) or wq_a + wq_b
  Weight wkv_a;           // [kv_lora + rope rows]
  // Per head: k_absorb[h] = attn_k_b,h [kv_lora rows][nope cols] (absorbs into
  // the query), k_decompress[h] [nope rows][kv_lora cols] (rebuilds keys),
  // v[h] = attn_v_b,h [v_head rows][kv_lora cols].
  std::vector<Weight> k_absorb, k_decompress, v;
  std::vector<std::vector<float>> owned;  // f32 transposes behind some of those
  Weight wo;
  // FFN: dense, or router + experts + shared experts.
  FfnWeights dense;
  MoeWeights moe;
};

// A multi-token-prediction block: a decoder block fed by eh_proj over
// [enorm(embed(token)) | hnorm(hidden)], with its own head norm; embed and
// head are the block's own when the file has them, else the trunk's.
struct MtpHead {
  Deepseek2Layer block;
  Weight eh_proj, embed, head;
  std::vector<float> enorm, hnorm, head_norm;
};

struct Deepseek2Weights {
  IoWeights io;
  std::vector<Deepseek2Layer> layers;
};

// [rows][cols] of w (any format) transposed into f32 [cols][rows].
std::vector<float> transpose_f32(const Weight& w) {
  const int64_t rows = w.rows(), cols = w.cols();
  std::vector<float> row(static_cast<size_t>(cols)), out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; r++) {
    dequantize_row(w.type, w.row(r), row.data(), cols);
    for (int64_t c = 0; c < cols; c++) out[c * rows + r] = row[c];
  }
  return out;
}

Weight f32_weight(const std::string& name, const std::vector<float>& data, int64_t cols, int64_t rows) {
  return Weight{name, GgmlType::F32, {cols, rows}, data.data(), data.size() * sizeof(float), nullptr, nullptr};
}

class Deepseek2Model final : public Model {
 public:
  Deepseek2Model(const GgufFile& f, Backend& be, const ModelOptions& opt, ModelConfig cfg)
      : cfg_(std::move(cfg)), be_(be), max_batch_(opt.max_batch_tokens), mla_mode_(opt.mla), shard_(opt.shard) {
    const MlaConfig& m = cfg_.mla;
    kv_width_ = m.kv_lora_rank + m.qk_rope;
    split_dimensions(opt);
    load(f, opt.load_mtp);
    allocate();
    if (opt.log_fusion) log_fusion();
  }

  const ModelConfig& config() const override { return cfg_; }
  // The latent cache: per token and layer, [rmsnorm(c) | k_pe]; values are the
  // first kv_lora floats of the same row, so there is no separate V.
  // Values are the first kv_lora_rank elements of each key row: groups must divide both.
  // The MTP block, when loaded, caches in one more layer after the trunk's.
  KvLayout kv_layout() const override {
    return {end_ - first_ + mtp_layers(), kv_width_, 0, std::gcd(kv_width_, cfg_.mla.kv_lora_rank)};
  }
  int64_t max_batch_tokens() const override { return max_batch_; }

  void forward(const Batch& b, PagedKvCache& kv, float* logits, float* hidden) override {
    const int64_t n = b.size();
    if (n == 0) return;
    check_batch(n);
    place_batch(b, kv, cfg_.n_vocab, slots_.data(), tables_.data());
    run(b, kv.store(), logits, hidden);
  }

  void forward_placed(const Batch& b, const BatchPlacement& place, KvStore& kv, float* logits, float* hidden) override {
    const int64_t n = b.size();
    if (n == 0) return;
    check_batch(n);
    use_placement(place, n);
    run(b, kv, logits, hidden);
  }

  // Rank 0 of a pipeline keeps up to one step per stage in flight (each in
  // its own activations): stage 0 of step k+1 runs while step k is further on.
  int steps_in_flight() const override { return shard_.pipelined() && shard_.leader() ? shard_.stages : 1; }

  void start_forward_placed(const Batch& b, const BatchPlacement& place, KvStore& kv, int slot) override {
    const int64_t n = b.size();
    check_batch(n);
    use_placement(place, n);
    const bool decompress = use_decompressed(b);
    in_flight_.start(
        shard_, slot, b, cfg_.n_embd, 1, x_, [&](int64_t, int64_t) { embed(b); },
        [&](int64_t, int64_t) { run_layers(b, kv, decompress); });
  }

  void finish_forward_placed(int slot, float* logits) override {
    const auto [b, back] = in_flight_.finish(shard_, slot);
    if (logits) head(*b, back, logits, nullptr);  // (null: a step drained at the end)
  }

 private:
  // The trunk over the placed batch (slots_, tables_), then the head.
  void run(const Batch& b, KvStore& kv, float* logits, float* hidden) {
    const int64_t n = b.size();
    const bool decompress = use_decompressed(b);
    if (!shard_.pipelined()) {
      embed(b);
      run_layers(b, kv, decompress);
    } else {
      // One micro-batch: run_layer works on the whole step's rows, so the
      // stages take turns within a step (they overlap across a step's
      // micro-batches only in the decoder families) — and across steps on rank 0.
      run_pipeline_stage(
          shard_, x_, n, cfg_.n_embd, 1, [&](int64_t, int64_t) { embed(b); },
          [&](int64_t, int64_t) { run_layers(b, kv, decompress); });
      if (shard_.stage != 0) return;
    }
    if (!logits && !hidden) return;  // a tensor-parallel rank that does not sample
    head(b, x_, logits, hidden);
  }

  // A leader's placement of the step's n rows (one layer group: MLA has no sliding layers).
  void use_placement(const BatchPlacement& place, int64_t n) {
    std::copy_n(place.slots[0].begin(), n, slots_.begin());
    std::copy_n(place.tables[0].begin(), n, tables_.begin());
  }

  void embed(const Batch& b) {
    be_.annotate_layer(-1);
    be_.embed(w_.io.tok_embd, b.tokens.data(), b.size(), x_);
  }
  // This rank's layers (all of them in one process); its cache holds them from 0.
  void run_layers(const Batch& b, KvStore& kv, bool decompress) {
    for (int l = first_; l < end_; l++) run_layer(w_.layers[l - first_], l, l - first_, b, kv, b.size(), decompress);
  }
  void head(const Batch& b, float* x, float* logits, float* hidden) {
    output_logits(be_, b, x, cfg_.n_embd, w_.io.output_norm.data(), cfg_.rms_eps, w_.io.output, xb_.data(), logits,
                  hidden);
  }

 public:
  int mtp_layers() const override { return mtp_ ? 1 : 0; }

  // x = eh_proj . [rmsnorm(embed(token)) | rmsnorm(hidden)], then one full
  // decoder block, then the head behind its own norm (DeepSeek-V3 MTP).
  void forward_mtp(const Batch& b, const float* hidden_in, PagedKvCache& kv, float* logits,
                   float* hidden_out) override {
    if (!mtp_) Model::forward_mtp(b, hidden_in, kv, logits, hidden_out);
    const int64_t n = b.size();
    if (n == 0) return;
    check_batch(n);
    const ModelConfig& c = cfg_;
    const int64_t dim = c.n_embd;
    place_batch(b, kv, c.n_vocab, slots_.data(), tables_.data());
    const bool decompress = use_decompressed(b);
    const MtpHead& m = *mtp_;
    be_.annotate_layer(c.n_layer);
    be_.embed(m.embed, b.tokens.data(), n, x_);
    be_.rmsnorm(x_, m.enorm.data(), xb_.data(), n, dim, c.rms_eps);
    be_.rmsnorm(hidden_in, m.hnorm.data(), xb2_.data(), n, dim, c.rms_eps);
    for (int64_t i = 0; i < n; i++) {
      std::memcpy(cat_.data() + i * 2 * dim, xb_.data() + i * dim, dim * sizeof(float));
      std::memcpy(cat_.data() + (i * 2 + 1) * dim, xb2_.data() + i * dim, dim * sizeof(float));
    }
    be_.matmul(m.eh_proj, cat_.data(), n, x_);
    run_layer(m.block, c.n_layer, c.n_layer, b, kv.store(), n, decompress);
    if (hidden_out) std::memcpy(hidden_out, x_, n * dim * sizeof(float));
    output_logits(be_, b, x_, dim, m.head_norm.data(), c.rms_eps, m.head, xb_.data(), logits);
  }

 private:
  // Tensor/expert parallelism: this rank's query heads (the latent cache,
  // shared by all heads, is whole on every rank) and FFN/expert widths.
  void split_dimensions(const ModelOptions& opt) {
    if (shard_.stages > cfg_.n_layer)
      throw Error(fmt::format("pipeline parallelism over {} stages: the model has only {} layers", shard_.stages,
                              cfg_.n_layer));
    first_ = shard_.first_layer(cfg_.n_layer);
    end_ = shard_.end_layer(cfg_.n_layer);
    if ((shard_.split() || shard_.experts_split() || shard_.pipelined()) && opt.load_mtp)
      throw Error("the multi-token-prediction block cannot run split across ranks yet: drop --spec mtp or --parallel");
    nh_ = static_cast<int>(shard_.share(cfg_.n_head, "attention heads"));
    h0_ = shard_.rank * nh_;
    local_moe_ = split_moe_widths(cfg_.moe, shard_);
    n_ff_ = shard_.share(cfg_.n_ff, "FFN rows");
  }

  int head_k() const { return cfg_.mla.qk_nope + cfg_.mla.qk_rope; }

  void check_batch(int64_t n) const {
    if (n > max_batch_) throw Error(fmt::format("batch of {} tokens exceeds the planned maximum {}", n, max_batch_));
  }

  // Decoder block `layer` on x_ (batch placed already); its cache is KV
  // layer kv_layer (of this stage's, under pipeline parallelism).
  void run_layer(const Deepseek2Layer& L, int layer, int kv_layer, const Batch& b, KvStore& kv, int64_t n,
                 bool decompress) {
    const ModelConfig& c = cfg_;
    const int64_t dim = c.n_embd;
    float* x = x_;
    be_.annotate_layer(layer);
    be_.rmsnorm(x, L.attn_norm.data(), xb_.data(), n, dim, c.rms_eps);
    project_qkv(L, b, n);
    write_latents(L, kv, kv_layer, n);
    if (decompress)
      attend_decompressed(L, b, kv, kv_layer, n);
    else
      attend_absorbed(L, b, kv, kv_layer, n);
    be_.matmul(L.wo, att_.data(), n, xb2_.data());
    shard_.sum(xb2_.data(), n * dim);  // this rank's heads' share
    be_.add(x, xb2_.data(), n * dim);

    be_.rmsnorm(x, L.ffn_norm.data(), xb_.data(), n, dim, c.rms_eps);
    if (L.moe.present())
      moe_->run(be_, L.moe, xb_.data(), n, xb2_.data());
    else
      run_ffn(be_, L.dense, FfnActivation::Silu, xb_.data(), n, hb_.data(), hb2_.data(), xb2_.data());
    shard_.sum_ffn(xb2_.data(), n, dim, L.moe.present(), combine_.get(), moe_ ? moe_->touched() : nullptr);
    be_.add(x, xb2_.data(), n * dim);
  }

  // q [n][n_head][nope | rope] and kv_a [n][kv_lora | rope], RoPE applied.
  void project_qkv(const Deepseek2Layer& L, const Batch& b, int64_t n) {
    const MlaConfig& m = cfg_.mla;
    if (L.wq.present()) {
      const Weight* ws[2] = {&L.wq, &L.wkv_a};
      float* ys[2] = {q_.data(), kv_a_.data()};
      be_.matmul_many(ws, 2, xb_.data(), n, ys);
    } else {
      const Weight* ws[2] = {&L.wq_a, &L.wkv_a};
      float* ys[2] = {q_a_.data(), kv_a_.data()};
      be_.matmul_many(ws, 2, xb_.data(), n, ys);
      be_.rmsnorm(q_a_.data(), L.q_a_norm.data(), q_a_norm_.data(), n, m.q_lora_rank, cfg_.rms_eps);
      be_.matmul(L.wq_b, q_a_norm_.data(), n, q_.data());
    }
    // The rotary parts sit at the end of each query head and of the kv_a row.
    be_.rope(q_.data() + m.qk_nope, b.positions.data(), n, nh_, head_k(), cfg_.rope);
    be_.rope(kv_a_.data() + m.kv_lora_rank, b.positions.data(), n, 1, static_cast<int>(kv_width_), cfg_.rope);
  }

  // kv[slot] = [rmsnorm(c) | k_pe]
  void write_latents(const Deepseek2Layer& L, KvStore& kv, int layer, int64_t n) {
    const int64_t r = cfg_.mla.kv_lora_rank;
    for (int64_t i = 0; i < n; i++) std::memcpy(lat_.data() + i * r, kv_a_.data() + i * kv_width_, r * sizeof(float));
    be_.rmsnorm(lat_.data(), L.kv_a_norm.data(), lat_norm_.data(), n, r, cfg_.rms_eps);
    float* row = kv_row_.data();
    for (int64_t i = 0; i < n; i++) {
      std::memcpy(row, lat_norm_.data() + i * r, r * sizeof(float));
      std::memcpy(row + r, kv_a_.data() + i * kv_width_ + r, cfg_.mla.qk_rope * sizeof(float));
      kv.write_k(layer, slots_[i], row);
    }
  }

  PagedKvLayerView latent_view(const KvStore& kv, int layer) const {
    PagedKvLayerView v = kv.layer_view(layer);
    v.v = v.k;  // values: the first kv_lora floats of each key row
    v.v_stride = v.k_stride;
    v.v_format = v.k_format;
    return v;
  }

  void attend_absorbed(const Deepseek2Layer& L, const Batch& b, const KvStore& kv, int layer, int64_t n) {
    const MlaConfig& m = cfg_.mla;
    const int nh = nh_, hk = head_k();
    const int64_t r = m.kv_lora_rank, w = kv_width_;
    // Query per head: [Wk_b,h . q_nope,h | q_pe,h]
    be_.matmul_heads(L.k_absorb.data(), nh, q_.data(), nh * hk, hk, n, q_abs_.data(), nh * w, w);
    for (int64_t i = 0; i < n; i++)
      for (int h = 0; h < nh; h++)
        std::memcpy(q_abs_.data() + (i * nh + h) * w + r, q_.data() + (i * nh + h) * hk + m.qk_nope,
                    m.qk_rope * sizeof(float));
    const AttentionShape shape{nh, 1, static_cast<int>(w), cfg_.attn_scale, static_cast<int>(r)};
    be_.attention(latent_view(kv, layer), {n, q_abs_.data(), att_lat_.data(), b.positions.data(), tables_.data()},
                  shape);
    // Out of the latent per head: Wv_b,h . o_h
    be_.matmul_heads(L.v.data(), nh, att_lat_.data(), nh * r, r, n, att_.data(), nh * m.v_head, m.v_head);
  }

  // Per sequence of the batch: rebuild keys and values of all its positions
  // up to the last one in the batch, then multi-head attention over them.
  void attend_decompressed(const Deepseek2Layer& L, const Batch& b, const KvStore& kv, int layer, int64_t n) {
    const MlaConfig& m = cfg_.mla;
    const int nh = nh_, hk = head_k(), vh = m.v_head;
    const int64_t r = m.kv_lora_rank;
    const PagedKvLayerView cache = kv.layer_view(layer);
    for (int64_t first = 0; first < n; first++) {
      // Each sequence once, at its first token; its tokens in batch order.
      const int32_t* table = tables_[first];
      bool seen = false;
      for (int64_t j = 0; j < first && !seen; j++) seen = tables_[j] == table;
      if (seen) continue;
      auto& tokens = seq_tokens_;
      tokens.clear();
      for (int64_t j = first; j < n; j++)
        if (tables_[j] == table) tokens.push_back(j);
      int32_t len = 0;
      for (int64_t i : tokens) len = std::max(len, b.positions[i] + 1);
      dec_lat_.resize(static_cast<size_t>(len) * r);
      dec_k_.resize(static_cast<size_t>(len) * nh * hk);
      dec_v_.resize(static_cast<size_t>(len) * nh * vh);
      for (int32_t p = 0; p < len; p++) {
        const int64_t slot =
            static_cast<int64_t>(table[p / cache.block_size]) * cache.block_size + p % cache.block_size;
        const float* row = cache.k_format.read(cache.k_row(slot), 0, kv_row_.data(), kv_width_);
        std::memcpy(dec_lat_.data() + p * r, row, r * sizeof(float));
        for (int h = 0; h < nh; h++)
          std::memcpy(dec_k_.data() + (static_cast<int64_t>(p) * nh + h) * hk + m.qk_nope, row + r,
                      m.qk_rope * sizeof(float));
      }
      be_.matmul_heads(L.k_decompress.data(), nh, dec_lat_.data(), r, 0, len, dec_k_.data(), nh * hk, hk);
      be_.matmul_heads(L.v.data(), nh, dec_lat_.data(), r, 0, len, dec_v_.data(), nh * vh, vh);
      // This sequence's queries, contiguous, against one block holding every position.
      const auto nt = static_cast<int64_t>(tokens.size());
      dec_q_.resize(static_cast<size_t>(nt) * nh * hk);
      dec_out_.resize(static_cast<size_t>(nt) * nh * vh);
      dec_pos_.resize(static_cast<size_t>(nt));
      for (int64_t j = 0; j < nt; j++) {
        std::memcpy(dec_q_.data() + j * nh * hk, q_.data() + tokens[j] * nh * hk, nh * hk * sizeof(float));
        dec_pos_[j] = b.positions[tokens[j]];
      }
      static const int32_t kOneBlock = 0;
      dec_tables_.assign(static_cast<size_t>(nt), &kOneBlock);
      const PagedKvLayerView view = PagedKvLayerView::f32(dec_k_.data(), dec_v_.data(), nh * hk, nh * vh, len);
      be_.attention(view, {nt, dec_q_.data(), dec_out_.data(), dec_pos_.data(), dec_tables_.data()},
                    {nh, nh, hk, cfg_.attn_scale, vh});
      for (int64_t j = 0; j < nt; j++)
        std::memcpy(att_.data() + tokens[j] * nh * vh, dec_out_.data() + j * nh * vh, nh * vh * sizeof(float));
    }
  }

  // Multiply-adds of each way of attending this batch (per layer; weights
  // and shapes as above): absorbed reads the latent once per query head,
  // decompressed first rebuilds every position's keys and values.
  bool use_decompressed(const Batch& b) const {
    if (mla_mode_ != MlaAttention::Auto) return mla_mode_ == MlaAttention::Decompressed;
    const MlaConfig& m = cfg_.mla;
    const double nh = nh_, r = m.kv_lora_rank, hk = head_k();
    double absorbed = 0, decompressed = 0;
    for (int64_t i = 0; i < b.size(); i++) {
      const double keys = b.positions[i] + 1;
      absorbed += keys * nh * (2 * r + m.qk_rope) + nh * r * (m.qk_nope + m.v_head);
      decompressed += keys * nh * (hk + m.v_head);
      // Each sequence rebuilds its positions once: count it at its longest token.
      bool longest = true;
      for (int64_t j = 0; j < b.size() && longest; j++)
        if (j != i && tables_[j] == tables_[i])
          longest = b.positions[j] < b.positions[i] || (b.positions[j] == b.positions[i] && j > i);
      if (longest) decompressed += (b.positions[i] + 1) * nh * r * (m.qk_nope + m.v_head);
    }
    return decompressed < absorbed;
  }

  void load(const GgufFile& f, bool with_mtp) {
    const ModelConfig& c = cfg_;
    WeightLoader ld(f);
    w_.io = load_io_weights(ld, be_, c, shard_.leader(), shard_.stage == 0);
    for (int l = 0; l < c.n_layer; l++)
      if (l >= first_ && l < end_)
        w_.layers.push_back(load_layer(ld, l));
      else
        ld.skip_prefix(fmt::format("blk.{}.", l), "pipeline parallelism: another stage's layer");
    if (with_mtp && c.n_mtp > 0) load_mtp(ld, c.n_layer);
    // The MTP blocks not loaded (not asked for, or past the first) take no
    // part in the trunk's math.
    for (int l = c.n_layer + (mtp_ ? 1 : 0); l < c.n_layer + c.n_mtp; l++)
      for (const auto& t : f.tensors())
        if (t.name.rfind(fmt::format("blk.{}.", l), 0) == 0) ld.skip(t.name, "multi-token-prediction block not loaded");
    ld.finish(c.arch);
  }

  // The first MTP block (blk.{n_layer}); llama.cpp's `nextn` tensor names.
  void load_mtp(const WeightLoader& ld, int l) {
    const ModelConfig& c = cfg_;
    const int64_t dim = c.n_embd;
    const std::string p = fmt::format("blk.{}.nextn.", l);
    auto m = std::make_unique<MtpHead>();
    m->block = load_layer(ld, l);
    m->eh_proj = be_.prepare_weight(ld.require(p + "eh_proj.weight", {2 * dim, dim}));
    m->enorm = ld.require_vector(p + "enorm.weight", dim);
    m->hnorm = ld.require_vector(p + "hnorm.weight", dim);
    m->head_norm = ld.optional_vector(p + "shared_head_norm.weight", dim);
    if (m->head_norm.empty()) m->head_norm = w_.io.output_norm;
    m->embed = ld.optional(p + "embed_tokens.weight", {dim, c.n_vocab});
    if (!m->embed.present()) m->embed = w_.io.tok_embd;
    const Weight head = ld.optional(p + "shared_head_head.weight", {dim, c.n_vocab});
    m->head = head.present() ? be_.prepare_weight(head) : w_.io.output;
    mtp_ = std::move(m);
  }

  Deepseek2Layer load_layer(const WeightLoader& ld, int l) {
    const ModelConfig& c = cfg_;
    const MlaConfig& m = c.mla;
    const MoeConfig& e = c.moe;
    const int64_t dim = c.n_embd, nh = c.n_head, hk = head_k(), r = m.kv_lora_rank;
    const std::string p = fmt::format("blk.{}.", l);
    Deepseek2Layer L;
    L.attn_norm = ld.require_vector(p + "attn_norm.weight", dim);
    if (m.q_lora_rank > 0) {
      L.wq_a = be_.prepare_weight(ld.require(p + "attn_q_a.weight", {dim, m.q_lora_rank}));
      L.q_a_norm = ld.require_vector(p + "attn_q_a_norm.weight", m.q_lora_rank);
      L.wq_b = be_.prepare_weight(shard_.rows(ld.require(p + "attn_q_b.weight", {m.q_lora_rank, nh * hk})));
    } else {
      L.wq = be_.prepare_weight(shard_.rows(ld.require(p + "attn_q.weight", {dim, nh * hk})));
    }
    L.wkv_a = be_.prepare_weight(ld.require(p + "attn_kv_a_mqa.weight", {dim, kv_width_}));
    L.kv_a_norm = ld.require_vector(p + "attn_kv_a_norm.weight", r);
    load_kv_b(ld, p, L);
    L.wo = be_.prepare_weight(shard_.columns(ld.require(p + "attn_output.weight", {nh * m.v_head, dim})));
    L.ffn_norm = ld.require_vector(p + "ffn_norm.weight", dim);
    if (l < e.n_dense_lead || e.routing.n_expert == 0)
      L.dense = load_ffn(ld, be_, p, "", dim, c.n_ff, false, shard_);
    else
      L.moe = load_moe(ld, be_, p, dim, e, shard_);
    return L;
  }

  // The per-head key/value up-projections, from the split attn_k_b + attn_v_b
  // (llama.cpp's conversions since 2025) or the older fused attn_kv_b.
  void load_kv_b(const WeightLoader& ld, const std::string& p, Deepseek2Layer& L) {
    const MlaConfig& m = cfg_.mla;
    const int nh = cfg_.n_head;
    const int64_t r = m.kv_lora_rank;
    const Weight k_b = ld.optional(p + "attn_k_b.weight", {m.qk_nope, r, nh});
    if (k_b.present()) {
      // Conversions that split attn_kv_b may keep it too: the same numbers.
      ld.skip(p + "attn_kv_b.weight", "the split attn_k_b / attn_v_b hold the same weights");
      const Weight v_b = ld.require(p + "attn_v_b.weight", {r, m.v_head, nh});
      for (int h = h0_; h < h0_ + nh_; h++) {  // this rank's heads
        const std::string tag = fmt::format(".{}", h);
        const Weight kh = weight_slice(k_b, h, k_b.name + tag);
        L.k_absorb.push_back(be_.prepare_weight(kh));
        L.owned.push_back(transpose_f32(kh));
        L.k_decompress.push_back(f32_weight(k_b.name + tag + ".T", L.owned.back(), r, m.qk_nope));
        L.v.push_back(be_.prepare_weight(weight_slice(v_b, h, v_b.name + tag)));
      }
    } else {
      // attn_kv_b: per head, nope key rows then v_head value rows, each kv_lora long.
      const int64_t per_head = m.qk_nope + m.v_head;
      const Weight kv_b = ld.require(p + "attn_kv_b.weight", {r, nh * per_head});
      for (int h = h0_; h < h0_ + nh_; h++) {  // this rank's heads
        const std::string tag = fmt::format(".{}", h);
        const Weight kh = weight_rows(kv_b, h * per_head, m.qk_nope, kv_b.name + ".k" + tag);
        L.k_decompress.push_back(be_.prepare_weight(kh));
        L.owned.push_back(transpose_f32(kh));
        L.k_absorb.push_back(f32_weight(kv_b.name + ".k" + tag + ".T", L.owned.back(), m.qk_nope, r));
        L.v.push_back(
            be_.prepare_weight(weight_rows(kv_b, h * per_head + m.qk_nope, m.v_head, kv_b.name + ".v" + tag)));
      }
    }
  }

  // Scratch for the largest batch, allocated once (the decompressed path's
  // buffers grow with the context instead: it runs for prefill only).
  void allocate() {
    const ModelConfig& c = cfg_;
    const MlaConfig& m = c.mla;
    const int64_t n = max_batch_, nh = nh_;
    const int64_t ff = n_ff_;
    x_store_.resize(n * c.n_embd);
    x_ = x_store_.data();
    in_flight_.resize(steps_in_flight(), n * c.n_embd);
    if (mtp_) cat_.resize(n * 2 * c.n_embd);
    xb_.resize(n * c.n_embd);
    xb2_.resize(n * c.n_embd);
    q_.resize(n * nh * head_k());
    q_a_.resize(n * std::max(1, m.q_lora_rank));
    q_a_norm_.resize(q_a_.size());
    kv_a_.resize(n * kv_width_);
    lat_.resize(n * m.kv_lora_rank);
    lat_norm_.resize(lat_.size());
    kv_row_.resize(kv_width_);
    q_abs_.resize(n * nh * kv_width_);
    att_lat_.resize(n * nh * m.kv_lora_rank);
    att_.resize(n * nh * m.v_head);
    hb_.resize(n * ff);
    hb2_.resize(n * ff);
    if (c.moe.routing.n_expert > 0) moe_ = std::make_unique<MoeFfn>(c.n_embd, local_moe_, n);
    if (moe_ && shard_.combines_experts()) combine_ = std::make_unique<ExpertCombine>(*shard_.experts_comm(), c.n_embd, n);
    slots_.resize(n);
    tables_.resize(n);
    seq_tokens_.reserve(n);
  }

  void log_fusion() const {
    int fused = 0;
    for (const auto& L : w_.layers)
      if (const FfnWeights* f = L.moe.present() ? L.moe.first_held() : &L.dense) fused += be_.fuses(f->gate, f->up);
    fmt::print(stderr, "fusion: ffn_gate+ffn_up+SwiGLU (dense, shared and routed experts): {} of {} layers\n", fused,
               cfg_.n_layer);
    fmt::print(stderr, "fusion: attn_q(_a)+attn_kv_a_mqa: one input pass per layer; MLA attention: {}\n",
               mla_mode_ == MlaAttention::Auto       ? "absorbed or decompressed per step by cost"
               : mla_mode_ == MlaAttention::Absorbed ? "absorbed"
                                                     : "decompressed");
  }

  ModelConfig cfg_;
  Backend& be_;
  int64_t max_batch_;
  MlaAttention mla_mode_;
  TensorShard shard_;
  int nh_ = 0, h0_ = 0;  // this rank's query heads: [h0_, h0_ + nh_)
  int64_t n_ff_ = 0;     // ...its share of the dense FFN rows
  MoeConfig local_moe_;  // ...and of each expert's
  int64_t kv_width_ = 0;
  Deepseek2Weights w_;
  std::unique_ptr<MtpHead> mtp_;  // set when the MTP block is loaded
  std::vector<float> cat_;        // MTP: [embedding | hidden] rows
  StepSlots in_flight_;           // rank 0's steps in flight under pp
  float* x_ = nullptr;            // the activations being computed: x_store_, or a step in flight's
  std::vector<float> x_store_, xb_, xb2_, q_, q_a_, q_a_norm_, kv_a_, lat_, lat_norm_, kv_row_, q_abs_, att_lat_, att_,
      hb_, hb2_;
  std::unique_ptr<MoeFfn> moe_;  // scratch of the MoE layers
  std::unique_ptr<ExpertCombine> combine_;  // --parallel-expert-sum all-to-all
  int first_ = 0, end_ = 0;                 // this rank's layers (pp; all of them in one process)
  std::vector<int64_t> slots_, seq_tokens_;
  std::vector<const int32_t*> tables_;
  std::vector<float> dec_lat_, dec_k_, dec_v_, dec_q_, dec_out_;
  std::vector<int32_t> dec_pos_;
  std::vector<const int32_t*> dec_tables_;
};

}  // namespace

std::unique_ptr<Model> make_deepseek2_model(const GgufFile& file, Backend& backend, const ModelOptions& options,
                                            ModelConfig config) {
  return std::make_unique<Deepseek2Model>(file, backend, options, std::move(config));
}

}  // namespace kestrel

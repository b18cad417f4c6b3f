// DeepSeek-V4 (GGUF architecture `deepseek4`), as llama.cpp's llama_model_deepseek4 computes it. Each
// token's residual is hc (4) streams of n_embd, the "hyper-connections":
//   streams = embed(token), in every stream
//   for each layer, for each branch (attention, then the FFN):
//     m = fn . rmsnorm(streams)          pre, post, comb = hyper_mix(m)   (kernels/ops.h; comb by Sinkhorn)
//     y = branch(rmsnorm(sum_i pre_i * stream_i))
//     streams[dst] = post_dst * y + sum_src comb[dst, src] * streams[src]
//   logits = output . rmsnorm(sum_i pre_i * stream_i)      (the head's own pre weights)
// Attention: one KV head of head_dim that is both key and value, sinks per head.
//   q  = per-head rmsnorm (no weight) of wq_b . rmsnorm(wq_a . x);  kv = rmsnorm(wkv . x)
//   RoPE (adjacent pairs) on the last n_rot dims of each; each query sees the raw kv of its last `window`
//   positions and, by the layer's compress ratio:
//     0    nothing else
//     128  every completed block of 128 positions, compressed into one key
//     4    the top_k completed blocks of 4 its lightning indexer scores highest (each block compressed over
//          an overlapping window of 8 positions)
//   out = the attention output with its RoPE turned back at the query's position, then the grouped low-rank
//   projection: per group of heads wo_a[g], then wo_b over the groups side by side.
// The compressing layers' RoPE (keys, queries, indexer) has its own base and the file's YaRN; the others
// plain RoPE at rope.freq_base. A compressed key of block b (positions [b*r, (b+1)*r)) exists once
// position (b+1)*r - 1 is in: per dim, a softmax over the block's positions of (wgate . x_p + ape[p % r])
// weights (wkv . x_p) (ratio 4: the previous block's positions too, through the first half of a state
// twice as wide), then rmsnorm, then RoPE at position b*r. The indexer keys are compressed alike by their
// own compressor and Hadamard-rotated like the indexer queries; a block's score is
// sum_h relu(q_h . k) * w_h (w = proj . x / sqrt(dim * heads)).
// FFN: DeepSeekMoE with sqrt(softplus) scores and a selection bias; the first hash_layer_count layers take
// their experts from the token id (ffn_gate_tid2eid); SwiGLU clamped in routed and shared experts.
//
// The cache, all in the paged blocks (so prefix caching, preemption and chunked prefill need nothing more):
//   sliding group, every layer: per position K = the raw kv (--kv-type), V = the compressors' state (float32,
//     as llama.cpp keeps it) [compressor kv | score | indexer kv | score]; released once behind every
//     query's reach (window_rows(): the raw window, and the 128 positions a ratio-128 block compresses);
//   full group, compressing layers: K = the compressed key (--kv-type, as llama.cpp's block caches), V = the
//     indexer key (float32), a row per 4 positions (KvLayout::full_row_stride): block b of 4 in row b, a
//     block of 128 in the row of its last 4 positions. A ratio-128 layer uses 1 of its 32 rows per block
//     (llama.cpp keeps a row per block: 32x the bytes there, the same for ratio 4).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/error.h"
#include "formats/block_formats.h"
#include "model/arch/deepseek4.h"
#include "model/arch/families.h"
#include "model/hparams_common.h"
#include "model/layer_stack.h"
#include "model/mla_attention.h"
#include "ops/compress_blocks.h"
#include "ops/hadamard.h"
#include "ops/hyper_connection.h"
#include "ops/lightning_indexer.h"

namespace kestrel {
namespace {

constexpr LayerRecipe kRecipe{.attention = LayerRecipe::Attention::Compressed};
constexpr int kIndexedRatio = 4, kHeavyRatio = 128;
// The full group's rows: one per 4 positions (every block end, of either ratio, is a position 4b + 3).
constexpr int kRowStride = 4;

// Per-layer float arrays that a file may give as one value for all layers.
std::vector<float> per_layer_floats(HparamReader& h, const std::string& key, int n_layer) {
  const GgufValue* v = h.file().find(h.arch() + "." + key);
  if (!v) throw h.bad(key, "is required for deepseek4");
  h.accept(key);
  std::vector<float> out(static_cast<size_t>(n_layer));
  if (v->type == GgufValueType::ARRAY) {
    const GgufArray& a = v->as_array();
    if (static_cast<int>(a.items.size()) < n_layer)
      throw h.bad(key, fmt::format("has {} entries for {} layers", a.items.size(), n_layer));
    for (int l = 0; l < n_layer; l++) out[l] = static_cast<float>(a.items[l].as_double());
  } else {
    std::fill(out.begin(), out.end(), static_cast<float>(v->as_double()));
  }
  for (int l = 0; l < n_layer; l++)
    if (!(out[l] >= 0.0f)) throw h.bad(key, fmt::format("= {} at layer {}: a SwiGLU limit is not negative", out[l], l));
  return out;
}

// The attention's keys: one KV head, the bottleneck, window, output groups, streams, ratios, indexer.
void read_attention(HparamReader& h, ModelConfig& c) {
  Dsv4Config& v = family_part<Dsv4Config>(c.family);
  // Attention: one KV head of key_length dims.
  if (const auto kv = h.opt_int("attention.head_count_kv"); kv && *kv != 1)
    throw h.bad("attention.head_count_kv", fmt::format("= {}: DeepSeek-V4 attends with one KV head", *kv));
  c.n_head_kv = 1;
  c.head_dim = static_cast<int>(h.need_int("attention.key_length"));
  if (const auto vl = h.opt_int("attention.value_length"); vl && *vl != c.head_dim)
    throw h.bad("attention.value_length", fmt::format("= {}: keys and values are the same {} dims", *vl, c.head_dim));
  if (const auto out = h.opt_int("embedding_length_out"); out && *out != 0 && *out != c.n_embd * h.need_int("hyper_connection.count"))
    throw h.bad("embedding_length_out", fmt::format("= {}, expected embedding_length x hyper_connection.count", *out));
  v.q_lora = static_cast<int>(h.need_int("attention.q_lora_rank"));
  v.window = static_cast<int>(h.need_int("attention.sliding_window"));
  if (v.window <= 0) throw h.bad("attention.sliding_window", "must be positive (the raw keys each query sees)");
  v.o_groups = static_cast<int>(h.need_int("attention.output_group_count"));
  v.o_lora = static_cast<int>(h.need_int("attention.output_lora_rank"));
  if (v.o_groups <= 0 || c.n_head % v.o_groups != 0)
    throw h.bad("attention.output_group_count", fmt::format("= {} must divide the {} heads", v.o_groups, c.n_head));
  v.hc = static_cast<int>(h.need_int("hyper_connection.count"));
  if (v.hc < 1 || v.hc > 16) throw h.bad("hyper_connection.count", fmt::format("= {} is not 1 to 16", v.hc));
  v.sinkhorn_iters = static_cast<int>(h.need_int("hyper_connection.sinkhorn_iterations"));
  if (v.sinkhorn_iters < 1) throw h.bad("hyper_connection.sinkhorn_iterations", "must be at least 1");
  v.hc_eps = static_cast<float>(h.opt_float("hyper_connection.epsilon").value_or(1e-6));
  v.hash_layers = static_cast<int>(h.int_or("hash_layer_count", 0));
  if (v.hash_layers < 0 || v.hash_layers > c.n_layer)
    throw h.bad("hash_layer_count", fmt::format("= {} is not within the {} layers", v.hash_layers, c.n_layer));
  // Compress ratios, one per block (MTP blocks included).
  const std::string rkey = "attention.compress_ratios";
  const GgufValue* rv = h.file().find(h.arch() + "." + rkey);
  if (!rv || rv->type != GgufValueType::ARRAY) throw h.bad(rkey, "is required (one ratio per layer)");
  h.accept(rkey);
  const GgufArray& ra = rv->as_array();
  if (static_cast<int>(ra.items.size()) < c.n_layer + c.n_mtp)
    throw h.bad(rkey, fmt::format("has {} entries for {} layers", ra.items.size(), c.n_layer + c.n_mtp));
  bool indexed = false;
  for (int l = 0; l < c.n_layer + c.n_mtp; l++) {
    const int64_t r = ra.items[l].as_int();
    if (r != 0 && r != kIndexedRatio && r != kHeavyRatio)
      throw h.bad(rkey, fmt::format("= {} at layer {}: DeepSeek-V4 compresses by 0, 4 or 128", r, l));
    v.ratios.push_back(static_cast<int>(r));
    indexed = indexed || r == kIndexedRatio;
  }
  v.idx_heads = static_cast<int>(h.need_int("attention.indexer.head_count"));
  v.idx_dim = static_cast<int>(h.need_int("attention.indexer.key_length"));
  v.idx_top_k = static_cast<int>(h.need_int("attention.indexer.top_k"));
  if (indexed && indexer_rotation_size(v.idx_dim) == 0)
    throw h.bad("attention.indexer.key_length",
                fmt::format("= {}: the indexer's Hadamard rotation needs a multiple of 64", v.idx_dim));
  if (v.idx_top_k <= 0) throw h.bad("attention.indexer.top_k", "must be positive");

}

// RoPE: adjacent pairs on the last rope.dimension_count dims; the compressing layers' base and YaRN.
void read_rope(HparamReader& h, ModelConfig& c) {
  Dsv4Config& v = family_part<Dsv4Config>(c.family);
  const bool indexed = std::count(v.ratios.begin(), v.ratios.end(), kIndexedRatio) > 0;
  RopeParams& r = c.rope;
  r.style = RopeStyle::Adjacent;
  r.n_rot = static_cast<int>(h.need_int("rope.dimension_count"));
  if (r.n_rot <= 0 || r.n_rot % 2 || r.n_rot > c.head_dim || (indexed && r.n_rot > v.idx_dim))
    throw h.bad("rope.dimension_count", fmt::format("= {} must be even and fit the heads", r.n_rot));
  r.freq_base = static_cast<float>(h.float_or("rope.freq_base", 10000.0));
  RopeParams& rc = v.rope_compress;
  rc = r;
  rc.freq_base = static_cast<float>(h.float_or("attention.compress_rope_freq_base", r.freq_base));
  const std::string scaling = h.opt_string("rope.scaling.type").value_or("none");
  if (scaling == "yarn") {
    const double factor = h.float_or("rope.scaling.factor", 1.0);
    if (!(factor >= 1.0)) throw h.bad("rope.scaling.factor", fmt::format("= {} must be at least 1 for YaRN", factor));
    rc.freq_scale = static_cast<float>(1.0 / factor);
    read_yarn(h, c, rc);
    // ggml scales cos/sin by 1 + 0.1 ln(factor); llama.cpp's deepseek4 passes attn_factor to cancel it
    // (its softmax scale stays 1/sqrt(head_dim): the YaRN log multiplier changes nothing there).
    rc.attn_factor = 1.0f / (1.0f + 0.1f * std::log(static_cast<float>(factor)));
    h.opt_float("rope.scaling.yarn_log_multiplier");
  } else if (scaling != "none") {
    throw h.bad("rope.scaling.type", fmt::format("= '{}' is not supported for deepseek4 (none or yarn)", scaling));
  }
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));

}

// DeepSeekMoE: every layer routed, sqrt(softplus) scores, clamped SwiGLU.
void read_experts(HparamReader& h, ModelConfig& c) {
  Dsv4Config& v = family_part<Dsv4Config>(c.family);
  MoeConfig& e = c.moe;
  MoeRouting& rt = e.routing;
  if (const auto dense = h.opt_int("leading_dense_block_count"); dense && *dense != 0)
    throw h.bad("leading_dense_block_count", "is not supported for deepseek4 (every layer has experts)");
  read_deepseek_experts(h, c);
  const int64_t gating = h.need_int("expert_gating_func");
  if (gating != static_cast<int>(ExpertGating::SqrtSoftplus))
    throw h.bad("expert_gating_func", fmt::format("= {}: DeepSeek-V4 scores experts by sqrt(softplus) (4)", gating));
  rt.gating = ExpertGating::SqrtSoftplus;
  for (const char* key : {"expert_group_count", "expert_group_used_count"})
    if (const auto g = h.opt_int(key); g && *g > 1)
      throw h.bad(key, fmt::format("= {}: expert groups are not part of deepseek4", *g));
  v.clamp_exp = per_layer_floats(h, "swiglu_clamp_exp", c.n_layer + c.n_mtp);
  v.clamp_shexp = h.has("swiglu_clamp_shexp") ? per_layer_floats(h, "swiglu_clamp_shexp", c.n_layer + c.n_mtp)
                                               : v.clamp_exp;
}

ModelConfig read(HparamReader& h, const ModelOptions&) {
  ModelConfig c = read_common(h, {.rms_eps = 1e-6, .n_ctx = 4096, .mtp_blocks = true, .ffn_optional = true});
  read_attention(h, c);
  read_rope(h, c);
  read_experts(h, c);
  return c;
}

// The window rows' V parts (floats from the row's start), for head_dim d and indexer key di: per compressor
// (the attention's, the indexer's) its per-position state kv and score, each twice the key wide.
struct VRow {
  struct Part {
    int64_t kv, score;
  };
  Part attn, index;
  int64_t width;
  VRow(int64_t d, int64_t di) : attn{0, 2 * d}, index{4 * d, 4 * d + 2 * di}, width(4 * d + 4 * di) {}
};

// A KV compressor (`{name}_kv/_gate/_ape/_norm`): per position kv = kv . x and score = gate . x +
// ape[pos % ratio], `state` wide (twice the key's `dim` where blocks overlap); a block's key is their
// per-dimension softmax fold, RMS-normed by norm.
struct Compressor {
  Weight kv, gate;
  std::vector<float> ape, norm;
  int64_t dim = 0, state = 0;
};

struct Hyper {
  Weight fn;
  std::vector<float> base, scale;
};

struct Attn {
  int ratio = 0;
  Weight wq_a, wq_b, wkv, wo_b;
  std::vector<Weight> wo_a;  // per group of heads
  std::vector<float> q_a_norm, kv_norm, sinks;
  // The compressor (ratio > 0) and the indexer with its own (ratio 4).
  Compressor comp, idx;
  Weight i_q_b, i_proj;
};

class Deepseek4 final : public LayerStack {
 public:
  Deepseek4(Backend& be, const ModelOptions& o, ModelConfig c)
      : LayerStack(be, o, std::move(c)), v_(dsv4_config(cfg_)), row_(cfg_.head_dim, v_.idx_dim) {
    streams_ = v_.hc;
    // Tensor parallelism splits the query heads and with them the output groups (each rank its groups'
    // heads, wo_b's matching columns: a partial sum); the raw kv, the compressors, the indexer and the
    // streams' mixes are computed whole on every rank (one KV head: nothing to split).
    nh_ = static_cast<int>(shard_.share(cfg_.n_head, "attention heads"));
    groups_ = static_cast<int>(shard_.share(v_.o_groups, "attention output groups"));
    if (shard_.split() && nh_ * v_.o_groups != groups_ * cfg_.n_head)
      throw Error(fmt::format("tensor parallelism over {} ranks: {} heads in {} output groups do not split alike",
                              shard_.n, cfg_.n_head, v_.o_groups));
    if ((shard_.split() || shard_.experts_split() || shard_.pipelined()) && o.load_mtp)
      throw Error("the multi-token-prediction block cannot run split across ranks yet: drop --spec mtp or --parallel");
    rope_plain_ = cfg_.rope;
    idx_rot_ = indexer_rotation_size(v_.idx_dim);
  }

  // Two cache layers per compressing layer, one per window-only layer (see the top of this file): in the
  // sliding group, every layer's raw key (--kv-type) and compressors' state (float32) per position, kept
  // for the last window_rows() positions; in the full group, a compressing layer's compressed key
  // (--kv-type) and indexer key (float32), a row per kRowStride positions.
  KvLayout kv_layout() const override {
    KvLayout l;
    const int n_window = end_ - first_ + mtp_layers();  // the MTP block, when loaded, caches after the trunk
    l.n_layer = n_window + n_full_layers();
    l.sliding.assign(static_cast<size_t>(l.n_layer), 0);
    std::fill(l.sliding.begin(), l.sliding.begin() + n_window, 1);
    l.sliding_window = window_rows();
    l.k_width = cfg_.head_dim;
    l.v_width = v_.idx_dim;
    l.sliding_k_width = cfg_.head_dim;
    l.sliding_v_width = row_.width;
    l.granule = std::gcd(static_cast<int64_t>(cfg_.head_dim), row_.width);
    if (v_.idx_dim > 0) l.granule = std::gcd(l.granule, static_cast<int64_t>(v_.idx_dim));
    l.v_f32_only = true;
    l.full_row_stride = kRowStride;
    return l;
  }

  int mtp_layers() const override { return mtp_ ? 1 : 0; }

  // Positions a sequence's window rows must reach back: the raw keys' window, and the compressors' state
  // of the blocks not yet complete (128 positions; 8 where blocks of 4 overlap).
  int32_t window_rows() const {
    int32_t w = v_.window;
    for (int k = 0; k < end_ - first_ + mtp_layers(); k++) {
      const int r = ratio_of(k);
      w = std::max(w, r == kIndexedRatio ? 2 * r : r);
    }
    return w;
  }
  // The model layer of a window cache layer (this rank's layers, then the MTP block's).
  int layer_of(int kv_layer) const { return kv_layer < end_ - first_ ? first_ + kv_layer : cfg_.n_layer; }
  int ratio_of(int kv_layer) const {
    const int l = layer_of(kv_layer);
    return l == cfg_.n_layer && mtp_ ? mtp_->block.attn.ratio : v_.ratios[static_cast<size_t>(l)];
  }
  int n_full_layers() const {
    int n = 0;
    for (int k = 0; k < end_ - first_ + mtp_layers(); k++) n += ratio_of(k) > 0;
    return n;
  }
  // The full-group cache layer holding the compressed keys of a compressing layer's window cache layer.
  int full_layer(int kv_layer) const {
    int j = end_ - first_ + mtp_layers();
    for (int k = 0; k < kv_layer; k++) j += ratio_of(k) > 0;
    return j;
  }

  // The MTP block (llama.cpp's deepseek4 graph_mtp): each of the target's streams at p, hnorm-ed, beside
  // enorm(embed(x_{p+1})), through eh_proj into that stream of the block's input; then a V4 layer (its
  // own compress ratio and cache layer), the trunk's hyper-connection head, and the block's head norm and
  // head (or the trunk's). Its output streams are what the next draft step reads.
  void forward_mtp(const Batch& b, const BatchPlacement& place, KvStore& kv, const float* hidden_in, float* logits,
                   float* hidden_out) override {
    if (!mtp_) Model::forward_mtp(b, place, kv, hidden_in, logits, hidden_out);
    const int64_t n = b.size(), dim = cfg_.n_embd, hc = v_.hc;
    if (n == 0) return;
    check_batch_size(n);
    const MtpHead& m = *mtp_;
    be_.annotate_layer(cfg_.n_layer);
    be_.embed(m.embed, b.tokens.data(), n, e_);
    be_.rmsnorm(e_, m.enorm.data(), e_, n, dim, cfg_.rms_eps);
    be_.rmsnorm(be_.host_view(hidden_in), m.hnorm.data(), h_, n * hc, dim, cfg_.rms_eps);
    for (int64_t s = 0; s < hc; s++) be_.copy(cat_ + s * 2 * dim, hc * 2 * dim, e_, dim, n, dim);
    be_.copy(cat_ + dim, 2 * dim, h_, dim, n * hc, dim);
    be_.matmul(m.eh_proj, cat_, n * hc, x_);
    run_layer({b, place, kv, cfg_.n_layer, cfg_.n_layer - first_, 0, n});
    if (hidden_out) {
      const Act out = be_.host_view(hidden_out);
      be_.copy(out, hc * dim, x_, hc * dim, n, hc * dim);
      be_.read(out, hidden_out, n * hc * dim);
    }
    head_rows(b, fold_streams(m.head_hc, x_, n), m.head_norm, m.head, logits, nullptr);
  }

 private:
  struct Layer {
    std::vector<float> attn_norm, ffn_norm;
    Hyper hc_attn, hc_ffn;
    Attn attn;
    MoeWeights moe;
  };
  // The multi-token-prediction block: a layer and its `nextn` tensors (embedding and head the trunk's
  // unless the file has the block's own).
  struct MtpHead : MtpTensors {
    Layer block;
    Hyper head_hc;  // the trunk's, or the MTP file's own
  };

  const Layer& at(int layer) const {
    return layer == cfg_.n_layer ? mtp_->block : layers_[static_cast<size_t>(layer - first_)];
  }

  Hyper load_hyper(const WeightLoader& ld, const std::string& p, int64_t mixes, int64_t scales) {
    Hyper h;
    h.fn = be_.prepare_weight(ld.require(p + "_fn.weight", {v_.hc * cfg_.n_embd, mixes}));
    h.base = ld.require_vector(p + "_base.weight", mixes);
    h.scale = ld.require_vector(p + "_scale.weight", scales);
    return h;
  }

  Compressor load_compressor(const WeightLoader& ld, const std::string& name, int64_t dim, int ratio) {
    Compressor c;
    c.dim = dim;
    c.state = (ratio == kIndexedRatio ? 2 : 1) * dim;
    c.kv = be_.prepare_weight(ld.require(name + "_kv.weight", {cfg_.n_embd, c.state}));
    c.gate = be_.prepare_weight(ld.require(name + "_gate.weight", {cfg_.n_embd, c.state}));
    const Weight ape = ld.require(name + "_ape.weight", {c.state, ratio});
    c.ape.resize(static_cast<size_t>(c.state * ratio));
    for (int r = 0; r < ratio; r++) dequantize_row(ape.type, ape.row(r), c.ape.data() + r * c.state, c.state);
    c.norm = ld.require_vector(name + "_norm.weight", dim);
    return c;
  }

  void load_layer(const WeightLoader& ld, int l) override { layers_.push_back(load_block(ld, l, v_)); }

  // Block l's tensors, by the hyperparameters v (the model file's, or the MTP file's for its block).
  Layer load_block(const WeightLoader& ld, int l, const Dsv4Config& v) {
    const ModelConfig& c = cfg_;
    const std::string p = layer_prefix(l);
    const int64_t dim = c.n_embd, d = c.head_dim, hd = int64_t{c.n_head} * d;
    const int64_t mixes = (2 + v.hc) * v.hc;
    Layer L;
    L.attn_norm = ld.require_vector(p + "attn_norm.weight", dim);
    L.ffn_norm = ld.require_vector(p + "ffn_norm.weight", dim);
    L.hc_attn = load_hyper(ld, p + "hc_attn", mixes, 3);
    L.hc_ffn = load_hyper(ld, p + "hc_ffn", mixes, 3);
    Attn& A = L.attn;
    A.ratio = v.ratios[l];
    A.wq_a = be_.prepare_weight(ld.require(p + "attn_q_a.weight", {dim, v.q_lora}));
    A.q_a_norm = ld.require_vector(p + "attn_q_a_norm.weight", v.q_lora);
    A.wq_b = be_.prepare_weight(shard_.rows(ld.require(p + "attn_q_b.weight", {v.q_lora, hd})));  // whole heads
    A.wkv = be_.prepare_weight(ld.require(p + "attn_kv.weight", {dim, d}));
    A.kv_norm = ld.require_vector(p + "attn_kv_a_norm.weight", d);
    A.sinks = shard_.part(ld.require_vector(p + "attn_sinks.weight", c.n_head), 0, c.n_head);
    const int64_t group_in = hd / v.o_groups;
    const Weight wo_a = ld.require(p + "attn_output_a.weight", {group_in, v.o_lora * v.o_groups});
    for (int g = shard_.rank * groups_; g < (shard_.rank + 1) * groups_; g++)
      A.wo_a.push_back(be_.prepare_weight(weight_rows(wo_a, g * v.o_lora, v.o_lora, fmt::format("{}.{}", wo_a.name, g))));
    A.wo_b = be_.prepare_weight(shard_.columns(ld.require(p + "attn_output_b.weight", {v.o_groups * v.o_lora, dim})));
    if (A.ratio > 0) A.comp = load_compressor(ld, p + "attn_compressor", d, A.ratio);
    if (A.ratio == kIndexedRatio) {
      const int64_t di = v.idx_dim;
      A.i_q_b = be_.prepare_weight(ld.require(p + "indexer.attn_q_b.weight", {v.q_lora, int64_t{v.idx_heads} * di}));
      A.i_proj = be_.prepare_weight(ld.require(p + "indexer.proj.weight", {dim, v.idx_heads}));
      A.idx = load_compressor(ld, p + "indexer_compressor", di, A.ratio);
    }
    // The experts: score-routed with a selection bias, or (hash layers) by the token's row of tid2eid.
    const bool hashed = l < v.hash_layers;
    if (hashed && ld.has(p + "exp_probs_b.bias"))
      throw Error(fmt::format("tensor '{}exp_probs_b.bias': layer {} routes by token id (hash_layer_count {}), "
                              "where llama.cpp applies no selection bias",
                              p, l, v.hash_layers));
    L.moe = load_moe(ld, be_, p, dim, c.moe, shard_);
    if (!hashed && L.moe.router_bias.empty())
      throw Error(fmt::format("missing tensor '{}exp_probs_b.bias' (DeepSeek-V4's score-routed layers have one)", p));
    if (hashed) {
      const int nu = c.moe.routing.n_used;
      L.moe.token_experts = ld.require_i32(p + "ffn_gate_tid2eid.weight", {nu, c.n_vocab});
      for (const int32_t id : L.moe.token_experts)
        if (id < 0 || id >= c.moe.routing.n_expert)
          throw Error(fmt::format("tensor '{}ffn_gate_tid2eid.weight' names expert {} of {}", p, id,
                                  c.moe.routing.n_expert));
    }
    // Image tokens' routing bias (the vision variant): text never uses it.
    if (ld.has(p + "exp_probs_b_vl.bias")) ld.skip(p + "exp_probs_b_vl.bias", "the image tokens' routing bias");
    for (auto& x : L.moe.experts) x.clamp = v.clamp_exp[l];
    L.moe.shared.clamp = v.clamp_shexp[l];
    return L;
  }

  bool reads_mtp_file() const override { return true; }

  void load_extra(const WeightLoader& ld, const ModelOptions& o) override {
    const ModelConfig& c = cfg_;
    head_hc_ = load_hyper(ld, "output_hc", v_.hc, 1);
    if (o.load_mtp && o.mtp_file) {
      // The block from a file of its own (llama.cpp's converter writes V4's so): by that file's
      // hyperparameters (its ratio and SwiGLU limits for the block), with that file's embedding, head and
      // hyper-connection head; every tensor of it used.
      const ModelConfig mc = check_mtp_file(*o.mtp_file);
      WeightLoader mld(*o.mtp_file);
      const IoWeights io = load_io_weights(mld, be_, mc, true, true);
      mtp_ = load_mtp(mld, dsv4_config(mc), io, load_hyper(mld, "output_hc", v_.hc, 1));
      for (int l = mc.n_layer + 1; l < mc.n_layer + mc.n_mtp; l++)
        mld.skip_prefix(layer_prefix(l), "llama.cpp runs the first MTP block only");
      mld.finish(c.arch + " MTP file");
    } else if (o.load_mtp && c.n_mtp > 0) {
      mtp_ = load_mtp(ld, v_, io_, head_hc_);
    }
    for (int l = c.n_layer + (o.mtp_file ? 0 : mtp_layers()); l < c.n_layer + c.n_mtp; l++)
      ld.skip_prefix(layer_prefix(l), o.mtp_file ? "the MTP block comes from its own file" : "MTP block not loaded");
  }

  // The first MTP block (blk.{n_layer}): its layer and `nextn` tensors; the embedding and head its own
  // when it has them, else io's (the file's); hc: the hyper-connection head its logits go through.
  std::unique_ptr<MtpHead> load_mtp(const WeightLoader& ld, const Dsv4Config& v, const IoWeights& io, Hyper hc) {
    const ModelConfig& c = cfg_;
    auto m = std::make_unique<MtpHead>();
    m->block = load_block(ld, c.n_layer, v);
    static_cast<MtpTensors&>(*m) = load_mtp_tensors(ld, be_, c.n_layer, c.n_embd, c.n_vocab, io);
    m->head_hc = std::move(hc);
    return m;
  }

  // The MTP file's hyperparameters, which must be the model's (its block after the same layers).
  ModelConfig check_mtp_file(const GgufFile& f) const {
    const ModelConfig m = read_model_config(f, ModelOptions{});
    const ModelConfig& c = cfg_;
    const Dsv4Config& a = v_;
    const Dsv4Config& b = dsv4_config(m);
    if (m.arch != c.arch) throw Error(fmt::format("{}: an MTP file of {}, not {}", f.path(), m.arch, c.arch));
    if (m.n_mtp < 1) throw Error(fmt::format("{}: has no multi-token-prediction block (nextn_predict_layers)", f.path()));
    const std::pair<const char*, std::pair<double, double>> same[] = {
        {"embedding_length", {c.n_embd, m.n_embd}},
        {"block_count - nextn_predict_layers", {c.n_layer, m.n_layer}},
        {"vocabulary size", {c.n_vocab, m.n_vocab}},
        {"attention.head_count", {c.n_head, m.n_head}},
        {"attention.key_length", {c.head_dim, m.head_dim}},
        {"attention.q_lora_rank", {a.q_lora, b.q_lora}},
        {"attention.sliding_window", {a.window, b.window}},
        {"attention.output_group_count", {a.o_groups, b.o_groups}},
        {"attention.output_lora_rank", {a.o_lora, b.o_lora}},
        {"attention.indexer.head_count", {a.idx_heads, b.idx_heads}},
        {"attention.indexer.key_length", {a.idx_dim, b.idx_dim}},
        {"attention.indexer.top_k", {a.idx_top_k, b.idx_top_k}},
        {"hyper_connection.count", {a.hc, b.hc}},
        {"hyper_connection.sinkhorn_iterations", {a.sinkhorn_iters, b.sinkhorn_iters}},
        {"hyper_connection.epsilon", {a.hc_eps, b.hc_eps}},
        {"rope.dimension_count", {c.rope.n_rot, m.rope.n_rot}},
        {"rope.freq_base", {c.rope.freq_base, m.rope.freq_base}},
        {"attention.compress_rope_freq_base", {a.rope_compress.freq_base, b.rope_compress.freq_base}},
        {"rope.scaling.factor", {a.rope_compress.freq_scale, b.rope_compress.freq_scale}},
        {"attention.layer_norm_rms_epsilon", {c.rms_eps, m.rms_eps}},
        {"expert_count", {c.moe.routing.n_expert, m.moe.routing.n_expert}},
        {"expert_used_count", {c.moe.routing.n_used, m.moe.routing.n_used}},
    };
    for (const auto& [key, v] : same)
      if (v.first != v.second)
        throw Error(fmt::format("{}: {} is {} where the model's is {} (not this model's MTP file)", f.path(), key,
                                v.second, v.first));
    return m;
  }

  void allocate(int64_t n) override {
    const ModelConfig& c = cfg_;
    const int64_t dim = c.n_embd, hc = v_.hc, d = c.head_dim, hd = int64_t{nh_} * d, di = v_.idx_dim;
    ones_.assign(static_cast<size_t>(std::max<int64_t>(hc * dim, d)), 1.0f);
    flat_ = ActBuffer(be_, n * hc * dim);
    state_ = ActBuffer(be_, n * hc * dim);
    mixes_ = ActBuffer(be_, n * (2 + hc) * hc);
    pre_ = ActBuffer(be_, n * hc);
    post_ = ActBuffer(be_, n * hc);
    comb_ = ActBuffer(be_, n * hc * hc);
    hin_ = ActBuffer(be_, n * dim);
    xn_ = ActBuffer(be_, n * dim);
    qa_ = ActBuffer(be_, n * v_.q_lora);
    qr_ = ActBuffer(be_, n * v_.q_lora);
    q_ = ActBuffer(be_, n * hd);
    att_ = ActBuffer(be_, n * hd);
    kv_ = ActBuffer(be_, n * d);
    vrow_ = ActBuffer(be_, n * row_.width);
    skv_ = ActBuffer(be_, n * 2 * std::max(d, di));
    ssc_ = ActBuffer(be_, n * 2 * std::max(d, di));
    ckey_ = ActBuffer(be_, n * d);
    ikey_ = ActBuffer(be_, n * std::max<int64_t>(di, 1));
    grp_in_ = ActBuffer(be_, n * hd / groups_);
    grp_out_ = ActBuffer(be_, n * v_.o_lora);
    oa_ = ActBuffer(be_, n * groups_ * v_.o_lora);
    if (di > 0) {
      iq_ = ActBuffer(be_, n * v_.idx_heads * di);
      iw_ = ActBuffer(be_, n * v_.idx_heads);
    }
    if (mtp_) {
      e_ = ActBuffer(be_, n * dim);
      h_ = ActBuffer(be_, n * hc * dim);
      cat_ = ActBuffer(be_, n * hc * 2 * dim);
    }
  }

  // ---- Hyper-connections ----
  // The branch's input: its rows' streams folded by this layer's pre weights, then normed (post and comb
  // kept by batch row for residual()).
  Act branch_input(const LayerRows& r, const Hyper& h, const std::vector<float>& norm) {
    const int64_t dim = cfg_.n_embd, hc = v_.hc, n = r.n;
    be_.rmsnorm(x(r), ones_.data(), flat_, n, hc * dim, cfg_.rms_eps);
    be_.matmul(h.fn, flat_, n, mixes_);
    ops::hyper_mix(be_, {mixes_, n, (2 + hc) * hc, static_cast<int>(hc), h.scale.data(), h.base.data(), v_.hc_eps,
                         v_.sinkhorn_iters, pre_, post_ + r.r0 * hc, comb_ + r.r0 * hc * hc});
    ops::hyper_collapse(be_, {x(r), pre_, n, static_cast<int>(hc), dim, hin_});
    be_.rmsnorm(hin_, norm.data(), xn_, n, dim, cfg_.rms_eps);
    return xn_;
  }

  void residual(int /*layer*/, Branch /*branch*/, Act x, Act y, int64_t r0, int64_t n) override {
    const int64_t hc = v_.hc, dim = cfg_.n_embd;
    ops::hyper_expand(be_, {x, y, post_ + r0 * hc, comb_ + r0 * hc * hc, n, static_cast<int>(hc), dim, state_});
    be_.copy(x, hc * dim, state_, hc * dim, n, hc * dim);
  }

  Act head_input(Act x, int64_t n) override { return fold_streams(head_hc_, x, n); }

  // The n rows' streams folded by a hyper-connection head's pre weights into n_embd rows (returned).
  Act fold_streams(const Hyper& h, Act x, int64_t n) {
    const int64_t dim = cfg_.n_embd, hc = v_.hc;
    be_.annotate_layer(-1);
    be_.rmsnorm(x, ones_.data(), flat_, n, hc * dim, cfg_.rms_eps);
    be_.matmul(h.fn, flat_, n, mixes_);
    ops::hyper_mix(be_, {mixes_, n, hc, static_cast<int>(hc), h.scale.data(), h.base.data(), v_.hc_eps, 0, pre_, Act(),
                         Act()});
    ops::hyper_collapse(be_, {x, pre_, n, static_cast<int>(hc), dim, hin_});
    return hin_;
  }

  // A scratch buffer of at least n floats, grown by doubling: the keys a row gathers grow with the context
  // (every completed block's), and decode should not allocate at every step.
  void grow(ActBuffer& b, int64_t n) {
    if (n > b.size()) b.ensure(be_, std::max(n, 2 * b.size()));
  }

  // ---- Attention ----
  // RoPE on the last n_rot dims of each of `heads` heads of `width` per row.
  void rope_tail(Act x, const int32_t* pos, int64_t n, int heads, int64_t width, const RopeParams& p) {
    be_.rope(x + (width - p.n_rot), pos, n, heads, static_cast<int>(width), p);
  }

  void attention(const LayerRows& r, Act y) override {
    const Layer& L = at(r.layer);
    const Attn& A = L.attn;
    const ModelConfig& c = cfg_;
    const Act xn = branch_input(r, L.hc_attn, L.attn_norm);
    const int64_t n = r.n, d = c.head_dim, di = v_.idx_dim, vw = row_.width;
    const int nh = nh_;
    const int32_t* pos = r.positions();
    const RopeParams& rope = A.ratio > 0 ? v_.rope_compress : rope_plain_;

    // Queries (and the indexer's from the same bottleneck) and the raw kv.
    be_.matmul(A.wq_a, xn, n, qa_);
    be_.rmsnorm(qa_, A.q_a_norm.data(), qr_, n, v_.q_lora, c.rms_eps);
    be_.matmul(A.wq_b, qr_, n, q_);
    be_.rmsnorm(q_, ones_.data(), q_, n * nh, d, c.rms_eps);
    rope_tail(q_, pos, n, nh, d, rope);
    be_.matmul(A.wkv, xn, n, kv_);
    be_.rmsnorm(kv_, A.kv_norm.data(), kv_, n, d, c.rms_eps);
    rope_tail(kv_, pos, n, 1, d, rope);

    // The V rows: this position's compressor state (the compressed keys come below).
    be_.fill(vrow_, n * vw, 0.0f);
    if (A.ratio > 0) compressor_state(A.comp, A.ratio, xn, pos, n, row_.attn);
    if (A.ratio == kIndexedRatio) compressor_state(A.idx, A.ratio, xn, pos, n, row_.index);
    be_.write_kv(r.kv.layer_write(r.kv_layer), r.slots(), n, kv_, vrow_);
    if (A.ratio > 0) complete_blocks(A, r);

    if (A.ratio == kIndexedRatio) {
      be_.matmul(A.i_q_b, qr_, n, iq_);
      rope_tail(iq_, pos, n, v_.idx_heads, di, v_.rope_compress);
      ops::hadamard(be_, {iq_, n * v_.idx_heads * di, idx_rot_});
      be_.matmul(A.i_proj, xn, n, iw_);
      be_.scale(iw_, n * v_.idx_heads, 1.0f / std::sqrt(static_cast<float>(di * v_.idx_heads)));
    }
    attend(A, r);

    // The rotation taken back out at each query's position, then the grouped output.
    RopeParams back = rope;
    back.inverse = true;
    rope_tail(att_, pos, n, nh, d, back);
    const int64_t gi = int64_t{nh} * d / groups_, lo = v_.o_lora;
    for (int g = 0; g < groups_; g++) {
      be_.copy(grp_in_, gi, att_ + g * gi, int64_t{nh} * d, n, gi);
      be_.matmul(A.wo_a[g], grp_in_, n, grp_out_);
      be_.copy(oa_ + g * lo, groups_ * lo, grp_out_, lo, n, lo);
    }
    be_.matmul(A.wo_b, oa_, n, y);
  }

  // A compressor's per-position state into its part of the V rows.
  void compressor_state(const Compressor& c, int ratio, Act xn, const int32_t* pos, int64_t n, const VRow::Part& part) {
    const int64_t vw = row_.width, w = c.state;
    be_.matmul(c.kv, xn, n, skv_);
    be_.matmul(c.gate, xn, n, ssc_);
    for (int64_t t = 0; t < n; t++) be_.add_bias(ssc_ + t * w, c.ape.data() + (pos[t] % ratio) * w, 1, w);
    be_.copy(vrow_ + part.kv, vw, skv_, w, n, w);
    be_.copy(vrow_ + part.score, vw, ssc_, w, n, w);
  }

  // The gathered blocks (entries rows each) folded by one compressor into keys (nb rows into out), normed,
  // rotated at the blocks' first positions (and Hadamard-rotated: the indexer's).
  void fold_blocks(const Compressor& c, const VRow::Part& part, int64_t nb, int entries, int split, bool hadamard,
                   Act out) {
    const int64_t vw = row_.width, w = c.dim;
    ops::compress_blocks(be_, {gathered_, nb, vw, entries, split, absent_.data(), part.kv, part.score, w, out});
    be_.rmsnorm(out, c.norm.data(), out, nb, w, cfg_.rms_eps);
    rope_tail(out, block_pos_.data(), nb, 1, w, v_.rope_compress);
    if (hadamard) ops::hadamard(be_, {out, nb * w, idx_rot_});
  }

  // The blocks the rows complete, compressed from the window rows' state into the full-group rows of the
  // completing positions: the key (K) and the indexer's key (V; zero for ratio 128, which has none).
  void complete_blocks(const Attn& A, const LayerRows& r) {
    const int ratio = A.ratio;
    const bool overlap = ratio == kIndexedRatio;
    const int entries = overlap ? 2 * ratio : ratio;
    const int64_t vw = row_.width;
    const int32_t* pos = r.positions();
    done_rows_.clear();
    for (int64_t t = 0; t < r.n; t++)
      if ((pos[t] + 1) % ratio == 0) done_rows_.push_back(t);
    const auto nb = static_cast<int64_t>(done_rows_.size());
    if (nb == 0) return;
    grow(gathered_, nb * entries * vw);
    block_pos_.clear();
    absent_.clear();
    const PagedKvLayerView v = state_view(r);
    for (int64_t b = 0; b < nb; b++) {
      const int64_t t = done_rows_[b];
      const int32_t start = pos[t] + 1 - ratio, first = overlap ? start - ratio : start;
      const int absent = first < 0 ? -first : 0;
      gather_pos_.clear();
      for (int i = 0; i < entries; i++) gather_pos_.push_back(std::max(0, first + i));
      be_.gather_kv_rows(v, r.tables()[t], gather_pos_.data(), entries, vw, gathered_ + b * entries * vw);
      block_pos_.push_back(start);
      absent_.push_back(absent);
    }
    const int split = overlap ? ratio : entries;
    fold_blocks(A.comp, row_.attn, nb, entries, split, false, ckey_);
    if (overlap)
      fold_blocks(A.idx, row_.index, nb, entries, split, true, ikey_);
    else if (v_.idx_dim > 0)
      be_.fill(ikey_, nb * v_.idx_dim, 0.0f);
    done_slots_.clear();
    const int64_t* slots = full_slots(r);
    const int64_t bs = r.kv.block_size();
    for (const int64_t t : done_rows_) done_slots_.push_back(slots[t] / bs * (bs / kRowStride) + slots[t] % bs / kRowStride);
    be_.write_kv(r.kv.layer_write(full_layer(r.kv_layer)), done_slots_.data(), nb, ckey_, ikey_);
  }

  // The window rows' state read as keys (they are float32).
  static PagedKvLayerView state_view(const LayerRows& r) { return r.kv.layer_view(r.kv_layer).values_as_keys(0); }
  // The full group's slots and block tables of the rows (r.slots()/tables() are the window group's).
  static const int64_t* full_slots(const LayerRows& r) { return r.place.slots[0].data() + r.r0; }
  static const int32_t* const* full_tables(const LayerRows& r) { return r.place.tables[0].data() + r.r0; }

  // Each row over its window of raw keys and the compressed keys its layer shows it.
  void attend(const Attn& A, const LayerRows& r) {
    const ModelConfig& c = cfg_;
    const int64_t d = c.head_dim, di = v_.idx_dim;
    const int nh = nh_;
    const int32_t* pos = r.positions();
    const PagedKvLayerView raw = r.kv.layer_view(r.kv_layer);
    PagedKvLayerView comp = raw, idx = raw;
    if (A.ratio > 0) {
      comp = r.kv.layer_view(full_layer(r.kv_layer));
      idx = comp.values_as_keys(0);
    }
    const int32_t* const* ftables = full_tables(r);
    AttentionShape shape{nh, 1, static_cast<int>(d), c.attn_scale};
    shape.sinks = A.sinks.data();
    // The ratio-4 layers' choices for every row at once, scored where the keys lie (candidate b: block b's
    // key, full-group row b); rows without a completed block choose nothing.
    const int top_k = v_.idx_top_k;
    if (A.ratio == kIndexedRatio) {
      cand_last_.resize(static_cast<size_t>(r.n));
      for (int64_t t = 0; t < r.n; t++) cand_last_[t] = (pos[t] + 1) / A.ratio - 1;
      selected_.resize(static_cast<size_t>(r.n * top_k));
      counts_.resize(static_cast<size_t>(r.n));
      ops::indexer_top_k(be_, {idx, {r.n, iq_, Act(), cand_last_.data(), ftables}, iw_,
                               {v_.idx_heads, static_cast<int>(di), top_k}, selected_.data(), counts_.data()});
    }
    for (int64_t t = 0; t < r.n; t++) {
      const int32_t p = pos[t];
      const int32_t first = std::max(0, p + 1 - v_.window);
      const int32_t blocks = A.ratio > 0 ? (p + 1) / A.ratio : 0;
      key_pos_.clear();
      for (int32_t j = first; j <= p; j++) key_pos_.push_back(j);
      const auto n_raw = static_cast<int64_t>(key_pos_.size());
      comp_pos_.clear();
      // (Rows of the full group: position / kRowStride.)
      if (A.ratio == kHeavyRatio) {
        for (int32_t b = 0; b < blocks; b++) comp_pos_.push_back(((b + 1) * A.ratio - 1) / kRowStride);
      } else if (A.ratio == kIndexedRatio) {
        for (int32_t k = 0; k < counts_[t]; k++) comp_pos_.push_back(selected_[t * top_k + k]);
      }
      const auto n_comp = static_cast<int64_t>(comp_pos_.size());
      grow(keys_, (n_raw + n_comp) * d);
      be_.gather_kv_rows(raw, r.tables()[t], key_pos_.data(), n_raw, d, keys_);
      if (n_comp > 0) be_.gather_kv_rows(comp, ftables[t], comp_pos_.data(), n_comp, d, keys_ + n_raw * d);
      const auto last = static_cast<int32_t>(n_raw + n_comp - 1);
      be_.attention_dense(keys_, keys_, d, d, n_raw + n_comp, {1, q_ + t * nh * d, att_ + t * nh * d, &last, nullptr},
                          shape);
    }
  }

  // ---- FFN ----
  void ffn(const LayerRows& r, Act y) override {
    const Layer& L = at(r.layer);
    const Act xn = branch_input(r, L.hc_ffn, L.ffn_norm);
    feed_forward(FfnWeights{}, L.moe, FfnActivation::Silu, xn, r.n, y, r.batch.tokens.data() + r.r0);
  }

  const Dsv4Config& v_;
  const VRow row_;
  int nh_ = 0, groups_ = 0;  // this rank's query heads and output groups
  RopeParams rope_plain_;
  int idx_rot_ = 0;
  std::vector<Layer> layers_;  // this rank's, from first_
  std::unique_ptr<MtpHead> mtp_;
  Hyper head_hc_;
  std::vector<float> ones_;
  ActBuffer flat_, state_, mixes_, pre_, post_, comb_, hin_, xn_;
  ActBuffer qa_, qr_, q_, att_, kv_, vrow_, skv_, ssc_, ckey_, ikey_, grp_in_, grp_out_, oa_, iq_, iw_;
  ActBuffer gathered_, keys_;
  ActBuffer e_, h_, cat_;  // MTP: the normed embedding, the normed target streams, [embedding | stream] rows
  std::vector<int64_t> done_rows_, done_slots_;
  std::vector<int32_t> block_pos_, absent_, gather_pos_, key_pos_, comp_pos_, selected_, counts_, cand_last_;
};

std::unique_ptr<Model> make(const GgufFile& f, Backend& be, const ModelOptions& o, ModelConfig c) {
  auto m = std::make_unique<Deepseek4>(be, o, std::move(c));
  m->init(f, o);
  return m;
}

// ---- synth: the keys and tensors llama.cpp's converter writes ----
// Block l's compress ratio: the preset's, 0 (window only) for an MTP block it does not list.
int block_ratio(const SynthShape& s, int64_t l) {
  return l < static_cast<int64_t>(synth_dsv4(s).ratios.size()) ? synth_dsv4(s).ratios[static_cast<size_t>(l)] : 0;
}

void synth_keys(SynthFile& out) {
  const SynthShape& s = out.shape();
  const SynthDeepseek& ds = s.ds;
  const SynthDsv4& v = synth_dsv4(s);
  const int64_t blocks = s.layers + ds.nextn;  // the MTP blocks after the trunk's
  if (static_cast<int64_t>(v.ratios.size()) < s.layers)
    throw Error(fmt::format("deepseek4: {} compress ratios for {} layers", v.ratios.size(), s.layers));
  if (s.heads % v.o_groups != 0) throw Error("deepseek4: the output groups must divide the heads");
  if (v.hash_layers > s.layers || ds.experts_used > ds.experts) throw Error("deepseek4: bad expert or hash-layer counts");
  const std::string a = s.arch + ".";
  synth_sizes(out, blocks, 1, v.rope_dims, 10000.0f, 1e-6f);
  if (ds.nextn > 0) out.u32("nextn_predict_layers", ds.nextn);
  out.u32("attention.key_length", v.head_dim);
  out.u32("attention.value_length", v.head_dim);
  out.u32("attention.q_lora_rank", ds.q_lora);
  out.u32("attention.sliding_window", v.window);
  synth_deepseek_experts(out, ExpertGating::SqrtSoftplus);
  std::vector<GgufValue> clamps, ratios;
  for (int64_t l = 0; l < blocks; l++) {
    clamps.push_back(GgufValue::f32(v.swiglu_limit));
    ratios.push_back(GgufValue::u32(static_cast<uint32_t>(block_ratio(s, l))));
  }
  out.writer().set(a + "swiglu_clamp_exp", GgufValue::array(GgufValueType::FLOAT32, clamps));
  out.writer().set(a + "swiglu_clamp_shexp", GgufValue::array(GgufValueType::FLOAT32, clamps));
  out.u32("attention.indexer.head_count", ds.idx_heads);
  out.u32("attention.indexer.key_length", ds.idx_dim);
  out.u32("attention.indexer.top_k", ds.idx_top_k);
  out.u32("attention.output_group_count", v.o_groups);
  out.u32("attention.output_lora_rank", v.o_lora);
  out.writer().set(a + "attention.compress_ratios", GgufValue::array(GgufValueType::UINT32, ratios));
  out.f32("attention.compress_rope_freq_base", v.compress_base);
  out.u32("hyper_connection.count", v.hc);
  out.u32("hyper_connection.sinkhorn_iterations", v.sinkhorn);
  out.f32("hyper_connection.epsilon", v.hc_eps);
  out.u32("hash_layer_count", v.hash_layers);
  out.u32("embedding_length_out", s.dim * v.hc);
  if (ds.yarn_factor > 0) {
    out.str("rope.scaling.type", "yarn");
    out.f32("rope.scaling.factor", ds.yarn_factor);
    out.u32("rope.scaling.original_context_length", ds.yarn_orig_ctx);
  }
}

// A hyper-connection mix: a small projection, biases near llama.cpp's init (base ~ 0), scale ~ 1.
void synth_hyper(SynthFile& out, const std::string& p, int64_t n_mix, int64_t n_scale) {
  const SynthShape& s = out.shape();
  const int64_t hc = synth_dsv4(s).hc;
  out.random(p + "_fn.weight", {hc * s.dim, n_mix}, SynthFile::fan_in(hc * s.dim));
  out.random(p + "_base.weight", {n_mix}, 0.5f);
  out.random(p + "_scale.weight", {n_scale}, 0.3f, 0.0f);
}

// A compressor's tensors (Compressor) for keys of dim.
void synth_compressor(SynthFile& out, const std::string& name, int64_t dim, int64_t ratio) {
  const int64_t dim_in = out.shape().dim, state = (ratio == kIndexedRatio ? 2 : 1) * dim;
  out.random(name + "_kv.weight", {dim_in, state}, SynthFile::fan_in(dim_in));
  out.random(name + "_gate.weight", {dim_in, state}, SynthFile::fan_in(dim_in));
  out.random(name + "_ape.weight", {state, ratio}, 0.5f);
  out.norm(name + "_norm.weight", dim);
}

// Layer l's tensors.
void synth_layer(SynthFile& out, int64_t l) {
  const SynthShape& s = out.shape();
  const SynthDeepseek& ds = s.ds;
  const SynthDsv4& v = synth_dsv4(s);
  const float in_std = SynthFile::fan_in(s.dim);
  const int64_t d = v.head_dim, hd = s.heads * d, hc = v.hc, mixes = (2 + hc) * hc;
  const std::string p = fmt::format("blk.{}.", l);
  out.norm(p + "attn_norm.weight", s.dim);
  out.random(p + "attn_q_a.weight", {s.dim, ds.q_lora}, in_std);
  out.norm(p + "attn_q_a_norm.weight", ds.q_lora);
  out.random(p + "attn_q_b.weight", {ds.q_lora, hd}, SynthFile::fan_in(ds.q_lora));
  out.random(p + "attn_kv.weight", {s.dim, d}, in_std);
  out.norm(p + "attn_kv_a_norm.weight", d);
  out.random(p + "attn_sinks.weight", {s.heads}, 1.0f);
  out.random(p + "attn_output_a.weight", {hd / v.o_groups, v.o_lora * v.o_groups}, SynthFile::fan_in(hd / v.o_groups));
  out.random(p + "attn_output_b.weight", {v.o_groups * v.o_lora, s.dim}, out.residual_std(v.o_groups * v.o_lora));
  synth_hyper(out, p + "hc_attn", mixes, 3);
  synth_hyper(out, p + "hc_ffn", mixes, 3);
  const int64_t ratio = block_ratio(s, l);
  if (ratio > 0) synth_compressor(out, p + "attn_compressor", d, ratio);
  if (ratio == kIndexedRatio) {
    const int64_t di = ds.idx_dim;
    synth_compressor(out, p + "indexer_compressor", di, ratio);
    out.random(p + "indexer.proj.weight", {s.dim, ds.idx_heads}, in_std);
    out.random(p + "indexer.attn_q_b.weight", {ds.q_lora, ds.idx_heads * di}, SynthFile::fan_in(ds.q_lora));
  }
  out.norm(p + "ffn_norm.weight", s.dim);
  out.random(p + "ffn_gate_inp.weight", {s.dim, ds.experts}, in_std);
  if (l < v.hash_layers) {
    // Each token's experts: distinct, from a fixed pseudo-random permutation per token.
    std::vector<int32_t> ids(static_cast<size_t>(ds.experts_used * s.vocab));
    uint64_t state = 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(l);
    std::vector<int32_t> perm(static_cast<size_t>(ds.experts));
    for (int64_t t = 0; t < s.vocab; t++) {
      std::iota(perm.begin(), perm.end(), 0);
      for (int64_t k = 0; k < ds.experts_used; k++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        const int64_t j = k + static_cast<int64_t>((state >> 33) % static_cast<uint64_t>(ds.experts - k));
        std::swap(perm[k], perm[j]);
        ids[t * ds.experts_used + k] = perm[k];
      }
    }
    out.writer().add_tensor(p + "ffn_gate_tid2eid.weight", GgmlType::I32, {ds.experts_used, s.vocab},
                            [ids](uint8_t* dst, size_t bytes) { std::memcpy(dst, ids.data(), bytes); });
  } else {
    out.random(p + "exp_probs_b.bias", {ds.experts}, 0.05f);
  }
  out.gated_ffn(p, "_exps", ds.ffn_expert, {ds.experts});
  out.gated_ffn(p, "_shexp", ds.ffn_expert * ds.experts_shared);
}

// The trunk's layers, then the MTP blocks: a layer plus its `nextn` tensors (embedding, head and the
// hyper-connection head shared with the trunk, as in a file llama.cpp loads with its trunk).
void synth(SynthFile& out) {
  const SynthShape& s = out.shape();
  synth_keys(out);
  synth_hyper(out, "output_hc", synth_dsv4(s).hc, 1);
  for (int64_t l = 0; l < s.layers + s.ds.nextn; l++) {
    synth_layer(out, l);
    if (l < s.layers) continue;
    const std::string p = fmt::format("blk.{}.nextn.", l);
    out.random(p + "eh_proj.weight", {2 * s.dim, s.dim}, SynthFile::fan_in(2 * s.dim));
    out.norm(p + "enorm.weight", s.dim);
    out.norm(p + "hnorm.weight", s.dim);
    out.norm(p + "shared_head_norm.weight", s.dim);
  }
}

SynthShape preset_shape(const std::string& preset) {
  SynthShape s;
  s.arch = "deepseek4";
  SynthDeepseek& d = s.ds;
  SynthDsv4& v = family_part<SynthDsv4>(s.family);
  d.norm_weights = true, d.weights_scale = 1.5f;
  if (preset == "tiny") {
    // Every feature at test width: a raw window of 8, ratio-4 layers whose indexer keeps 3 blocks (prompts
    // past 12 tokens select), a ratio-128 layer (prompts past 128 tokens compress), a window-only layer, a
    // hash-routed first layer, 4 streams, SwiGLU clamped at 1 (it bites at these scales), YaRN, an MTP block.
    s.dim = 64, s.layers = 4, s.heads = 4, s.ffn = 128, s.vocab = 512, s.ctx = 4096;
    v.head_dim = 128, v.rope_dims = 16, v.window = 8, v.o_groups = 2, v.o_lora = 16, v.hash_layers = 1;
    v.swiglu_limit = 1.0f, v.ratios = {4, 0, 128, 4, 0};  // the last: the MTP block's, window only
    d.nextn = 1;
    d.q_lora = 32, d.experts = 8, d.experts_used = 2, d.experts_shared = 1, d.ffn_expert = 32;
    d.idx_heads = 8, d.idx_dim = 64, d.idx_top_k = 3;
    d.yarn_factor = 4.0f, d.yarn_orig_ctx = 1024;
  } else if (preset == "attn-bench") {
    // V4-Flash's attention at its real widths (64 heads of 512, window 128, indexer 64 x 128 top-k 512, 8
    // output groups of rank 1024, 4 streams) in two layers, one indexed (ratio 4) and one of ratio 128, with
    // 8 narrow experts: what a token spends outside the experts.
    s.dim = 4096, s.layers = 2, s.heads = 64, s.ffn = 256, s.vocab = 32000, s.ctx = 1048576;
    v.head_dim = 512, v.rope_dims = 64, v.window = 128, v.o_groups = 8, v.o_lora = 1024, v.hash_layers = 0;
    v.ratios = {4, 128};
    d.q_lora = 1024, d.experts = 8, d.experts_used = 2, d.experts_shared = 1, d.ffn_expert = 256;
    d.idx_heads = 64, d.idx_dim = 128, d.idx_top_k = 512;
    d.yarn_factor = 16.0f, d.yarn_orig_ctx = 65536;
  } else {  // flash: DeepSeek-V4-Flash (284B, 13B active)
    s.dim = 4096, s.layers = 43, s.heads = 64, s.ffn = 2048, s.vocab = 129280, s.ctx = 1048576;
    v.head_dim = 512, v.rope_dims = 64, v.window = 128, v.o_groups = 8, v.o_lora = 1024, v.hash_layers = 3;
    v.ratios.assign(44, 0);  // and the MTP block's (window only)
    for (int64_t l = 2; l < 43; l++) v.ratios[l] = l % 2 == 0 ? 4 : 128;
    d.nextn = 1;
    d.q_lora = 1024, d.experts = 256, d.experts_used = 6, d.experts_shared = 1, d.ffn_expert = 2048;
    d.idx_heads = 64, d.idx_dim = 128, d.idx_top_k = 512;
    d.yarn_factor = 16.0f, d.yarn_orig_ctx = 65536;
  }
  s.kv_heads = 1;
  return s;
}

std::vector<SynthPreset> presets() {
  std::vector<SynthPreset> p;
  for (const char* name : {"tiny", "attn-bench", "flash"}) p.push_back({name, preset_shape(name)});
  return p;
}

// Splits a file with an MTP block as llama.cpp's converter publishes V4: `path` keeps the trunk (block_count
// without the block, no nextn_predict_layers), `mtp_path` gets every key and the block with the embedding,
// the head and the hyper-connection head (the converter's --mtp file). The MTP file's hyper-connection head is
// the trunk's reversed (float32), so a reader that takes the trunk's instead shows.
void split_mtp(const std::string& path, const std::string& mtp_path) {
  const GgufFile f = GgufFile::open(path);
  const std::string arch = f.get_string("general.architecture").value_or("");
  const auto blocks = f.get_int(arch + ".block_count"), nextn = f.get_int(arch + ".nextn_predict_layers");
  if (!blocks || !nextn || *nextn < 1) throw Error("--mtp-file: the model has no MTP block (use --mtp 1)");
  const int64_t n = *blocks - *nextn;
  auto mtp_block = [n](const std::string& name) {
    if (name.rfind("blk.", 0) != 0) return false;
    return std::stoll(name.substr(4, name.find('.', 4) - 4)) >= n;
  };
  GgufWriter trunk, mtp;
  for (const auto& [k, v] : f.metadata()) {
    mtp.set(k, v);
    if (k == arch + ".nextn_predict_layers") continue;
    if (k == arch + ".block_count") {
      trunk.set(k, GgufValue::u32(static_cast<uint32_t>(n)));
    } else if (k.rfind(arch + ".swiglu_clamp_", 0) == 0 && v.type == GgufValueType::ARRAY) {
      // Written per block of the file (the converter's [limit] * block_count); the ratios keep the MTP block's.
      GgufArray a = v.as_array();
      a.items.resize(static_cast<size_t>(n));
      trunk.set(k, GgufValue::array(a.elem_type, a.items));
    } else {
      trunk.set(k, v);
    }
  }
  std::vector<float> reversed;  // alive until written
  for (const auto& t : f.tensors()) {
    if (mtp_block(t.name)) {
      mtp.add_tensor_bytes(t.name, t.type, t.ne, t.data);
      continue;
    }
    trunk.add_tensor_bytes(t.name, t.type, t.ne, t.data);
    if (t.name == "output_hc_fn.weight" && t.type == GgmlType::F32) {
      reversed.resize(static_cast<size_t>(t.n_elements()));
      std::memcpy(reversed.data(), t.data, t.nbytes);
      std::reverse(reversed.begin(), reversed.end());
      mtp.add_tensor_bytes(t.name, t.type, t.ne, reversed.data());
    } else if (t.name.rfind("blk.", 0) != 0) {
      mtp.add_tensor_bytes(t.name, t.type, t.ne, t.data);  // embedding, head, head norm, hc head
    }
  }
  mtp.write_file(mtp_path);
  const std::string tmp = path + ".trunk";
  trunk.write_file(tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw Error(fmt::format("{}: cannot replace it with {}", path, tmp));
}


}  // namespace

const Family& deepseek4_family() {
  static const Family f = [] {
    Family f{"deepseek4", "DeepSeek-V4-Flash, V4-Pro", kRecipe, read, make, synth, presets};
    f.split_mtp = split_mtp;
    return f;
  }();
  return f;
}

}  // namespace kestrel

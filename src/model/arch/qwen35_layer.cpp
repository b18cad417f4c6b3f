#include "model/arch/qwen35_layer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "model/arch/families.h"
#include "model/arch/llama_layer.h"
#include "model/gqa_attention.h"
#include "model/hparams_common.h"
#include "model/layer_stack.h"
#include "ops/gated_delta_net.h"

namespace kestrel {
namespace {

// rope.dimension_sections: Qwen3.5's interleaved multi-section RoPE (llama.cpp's IMROPE). Rotary pair i takes
// section (i % total) in turn t, h, w of the first three sections, else the fourth; a text token carries its
// position in the first three and 0 in the fourth. So for text it is NeoX RoPE exactly when no pair falls to the
// fourth section: refused otherwise. An image's rows (mmproj qwen3vl_merger) turn by their own t, h, w
// (ModelConfig::rope_sections, gqa_attention.cpp).
void check_rope_sections(HparamReader& h, ModelConfig& c) {
  const std::string key = "rope.dimension_sections";
  const GgufValue* v = h.file().find(h.arch() + "." + key);
  if (!v) throw h.bad(key, "is required for qwen35 (its multi-section RoPE)");
  h.accept(key);
  if (v->type != GgufValueType::ARRAY || v->as_array().items.size() > 4)
    throw h.bad(key, "must be an array of at most 4 section sizes");
  int64_t s[4] = {0, 0, 0, 0};
  for (size_t i = 0; i < v->as_array().items.size(); i++) s[i] = v->as_array().items[i].as_int();
  const int64_t total = s[0] + s[1] + s[2] + s[3];
  if (total <= 0 || std::min({s[0], s[1], s[2], s[3]}) < 0) throw h.bad(key, "must be sizes that sum above 0");
  for (int64_t i = 0; i < c.rope.n_rot / 2; i++) {
    const int64_t sec = i % total;
    const bool text = (sec % 3 == 0 && sec < 3 * s[0]) || (sec % 3 == 1 && sec < 3 * s[1]) ||
                      (sec % 3 == 2 && sec < 3 * s[2]);
    if (!text)
      throw h.bad(key, fmt::format("[{}, {}, {}, {}] leave rotary pair {} of {} to the fourth section (a text token "
                                   "would not rotate it): not supported",
                                   s[0], s[1], s[2], s[3], i, c.rope.n_rot / 2));
  }
  for (int i = 0; i < 4; i++) c.rope_sections[i] = static_cast<int>(s[i]);
}

// Which blocks are Gated DeltaNet: attention.recurrent_layers (one flag per block, MTP included), else all but
// every full_attention_interval-th trunk block (default 4).
std::vector<uint8_t> read_recurrent_layers(HparamReader& h, const ModelConfig& c) {
  const int blocks = c.n_layer + c.n_mtp;
  std::vector<uint8_t> rec(static_cast<size_t>(blocks), 0);
  const std::string key = "attention.recurrent_layers";
  if (const GgufValue* v = h.file().find(h.arch() + "." + key)) {
    h.accept(key);
    if (v->type != GgufValueType::ARRAY || static_cast<int>(v->as_array().items.size()) != blocks)
      throw h.bad(key, fmt::format("must hold one flag per block ({})", blocks));
    for (int l = 0; l < blocks; l++) {
      const GgufValue& x = v->as_array().items[static_cast<size_t>(l)];
      rec[static_cast<size_t>(l)] = x.type == GgufValueType::BOOL ? x.as_bool() : x.as_int() != 0;
      if (l >= c.n_layer && rec[static_cast<size_t>(l)])
        throw h.bad(key, fmt::format("marks the multi-token-prediction block {} recurrent: it is full attention", l));
    }
  } else {
    const int64_t every = h.int_or("full_attention_interval", 4);
    if (every < 1) throw h.bad("full_attention_interval", "must be positive");
    for (int l = 0; l < c.n_layer; l++) rec[static_cast<size_t>(l)] = (l + 1) % every != 0;
  }
  if (std::find(rec.begin(), rec.begin() + c.n_layer, 0) == rec.begin() + c.n_layer)
    throw h.bad(key, "leaves no full-attention block");
  return rec;
}

GdnShape read_gdn(HparamReader& h, const ModelConfig& c, bool interleaved) {
  GdnShape g;
  g.d_conv = static_cast<int>(h.need_int("ssm.conv_kernel"));
  g.head_dim = static_cast<int>(h.need_int("ssm.state_size"));
  g.n_v_heads = static_cast<int>(h.need_int("ssm.time_step_rank"));
  g.n_k_heads = static_cast<int>(h.need_int("ssm.group_count"));
  g.interleaved = interleaved;
  g.eps = c.rms_eps;
  const int64_t inner = h.need_int("ssm.inner_size");
  if (g.d_conv < 2 || g.d_conv > 16) throw h.bad("ssm.conv_kernel", fmt::format("= {}: 2 to 16 taps", g.d_conv));
  if (g.head_dim > 512) throw h.bad("ssm.state_size", fmt::format("= {}: at most 512", g.head_dim));
  if (g.n_v_heads % g.n_k_heads != 0)
    throw h.bad("ssm.time_step_rank", fmt::format("= {} value heads do not group over ssm.group_count = {} key heads",
                                                  g.n_v_heads, g.n_k_heads));
  if (inner != g.value_dim())
    throw h.bad("ssm.inner_size", fmt::format("= {} but {} value heads of {} make {}", inner, g.n_v_heads, g.head_dim,
                                              g.value_dim()));
  return g;
}

}  // namespace

ModelConfig read_qwen_hybrid(HparamReader& h, QwenHybrid kind) {
  const bool moe = kind != QwenHybrid::Qwen35;
  ModelConfig c = read_common(h, {.rms_eps = 1e-6, .mtp_blocks = true, .ffn_optional = moe});
  // The heads as read_gqa_heads reads them, without its check of blk.0's attn_q rows: a gated attn_q has twice
  // n_head * head_dim (and blk.0 is usually a Gated DeltaNet block).
  c.n_head_kv = static_cast<int>(h.int_or("attention.head_count_kv", c.n_head));
  if (c.n_head_kv <= 0 || c.n_head % c.n_head_kv != 0)
    throw h.bad("attention.head_count_kv", fmt::format("= {}: {} heads cannot be grouped over it", c.n_head_kv, c.n_head));
  c.head_dim = static_cast<int>(h.need_int("attention.key_length"));
  if (c.head_dim % 2 != 0) throw h.bad("attention.key_length", "must be even");
  if (h.int_or("attention.value_length", c.head_dim) != c.head_dim)
    throw h.bad("attention.value_length", "must equal attention.key_length");
  read_rope(h, c, RopeStyle::NeoX);
  if (kind != QwenHybrid::Qwen3Next) check_rope_sections(h, c);
  HybridConfig& hy = family_part<HybridConfig>(c.family);
  hy.gdn = read_gdn(h, c, kind == QwenHybrid::Qwen3Next);
  hy.recurrent = read_recurrent_layers(h, c);
  if (moe) {
    read_qwen_experts(h, c, /*normalize=*/true);
    c.moe.n_ff_shared = h.int_or("expert_shared_feed_forward_length", c.n_ff);
    c.moe.shared_gate = true;
  }
  return c;
}

namespace {

class HybridLayers final : public LayerStack {
 public:
  HybridLayers(Backend& be, const ModelOptions& o, ModelConfig c)
      : LayerStack(be, o, std::move(c)), heads_(split_gqa_heads(cfg_, shard_)) {
    if (shard_.split() || shard_.experts_split() || shard_.pipelined())
      throw Error(fmt::format("{}: the linear-attention layers cannot run split across ranks yet (drop --parallel)",
                              cfg_.arch));
    // Each block's place in the cache: attention blocks their KV layer, Gated DeltaNet blocks their state layer.
    int attn = 0, rec = 0;
    for (int l = 0; l < cfg_.n_layer + cfg_.n_mtp; l++)
      cache_index_.push_back(hybrid_config(cfg_).is_recurrent(l) ? rec++ : attn++);
    n_attn_ = attn;
    n_rec_ = rec;
  }

  KvLayout kv_layout() const override {
    const int64_t kv_dim = static_cast<int64_t>(heads_.n_head_kv) * cfg_.head_dim;
    // The trunk's attention blocks, then the MTP block's when it is loaded (the last attention block).
    KvLayout l{n_attn_ - (mtp_ ? 0 : cfg_.n_mtp), kv_dim, kv_dim, cfg_.head_dim};
    l.n_recurrent = n_rec_;
    l.state_floats = hybrid_config(cfg_).gdn.state_floats();
    return l;
  }

 private:
  struct Linear {  // a Gated DeltaNet block's own tensors
    Weight qkv, z, beta, alpha, ba, out;
    std::vector<float> conv_w, dt_bias, a, norm;
  };
  struct Layer {
    std::vector<float> attn_norm, ffn_norm;
    GqaWeights attn;
    Linear lin;
    FfnWeights dense;
    MoeWeights moe;
  };

  Linear load_linear(const WeightLoader& ld, const std::string& p) const {
    const GdnShape& g = hybrid_config(cfg_).gdn;
    const int64_t dim = cfg_.n_embd;
    Linear L;
    if (ld.has(p + "ssm_in.weight"))
      throw Error(fmt::format("{}: tensor '{}ssm_in.weight' is the legacy fused q/k/v/z layout of early Qwen3-Next "
                              "conversions, which Kestrel does not read: convert the model again",
                              cfg_.arch, p));
    L.qkv = be_.prepare_weight(ld.require(p + "attn_qkv.weight", {dim, g.channels()}));
    L.z = be_.prepare_weight(ld.require(p + "attn_gate.weight", {dim, g.value_dim()}));
    if (ld.has(p + "ssm_ba.weight")) {  // Qwen3-Next: per key head [its value heads' beta | their alpha]
      L.ba = be_.prepare_weight(ld.require(p + "ssm_ba.weight", {dim, 2 * int64_t{g.n_v_heads}}));
    } else {
      L.beta = be_.prepare_weight(ld.require(p + "ssm_beta.weight", {dim, g.n_v_heads}));
      L.alpha = be_.prepare_weight(ld.require(p + "ssm_alpha.weight", {dim, g.n_v_heads}));
    }
    L.conv_w = ld.optional_floats(p + "ssm_conv1d.weight", {g.d_conv, g.channels()});
    if (L.conv_w.empty()) ld.require(p + "ssm_conv1d.weight", {g.d_conv, g.channels()});  // names what is missing
    L.dt_bias = ld.require_vector(p + "ssm_dt.bias", g.n_v_heads);
    L.a = ld.require_vector(p + "ssm_a", g.n_v_heads);
    L.norm = ld.require_vector(p + "ssm_norm.weight", g.head_dim);
    L.out = be_.prepare_weight(ld.require(p + "ssm_out.weight", {g.value_dim(), dim}));
    return L;
  }

  Layer load_block(const WeightLoader& ld, int l) {
    const std::string p = layer_prefix(l);
    const int64_t dim = cfg_.n_embd;
    Layer L;
    L.attn_norm = ld.require_vector(p + "attn_norm.weight", dim);
    if (hybrid_config(cfg_).is_recurrent(l))
      L.lin = load_linear(ld, p);
    else
      L.attn = load_gqa(ld, be_, p, cfg_, heads_, shard_, {.qk_norm = true, .q_gate = true});
    L.ffn_norm = ld.require_vector(p + "post_attention_norm.weight", dim);
    if (cfg_.moe.routing.n_expert > 0)
      L.moe = load_moe(ld, be_, p, dim, cfg_.moe, shard_);
    else
      L.dense = load_ffn(ld, be_, p, "", dim, cfg_.n_ff, false, shard_);
    return L;
  }

  void load_layer(const WeightLoader& ld, int l) override { layers_.push_back(load_block(ld, l)); }

  void load_extra(const WeightLoader& ld, const ModelOptions& o) override {
    if (o.load_mtp && cfg_.n_mtp > 1)
      throw Error(fmt::format("{}: only one multi-token-prediction block is run", cfg_.arch));
    mtp_ = load_nextn_block<Layer>(ld, o, [&](int l) { return load_block(ld, l); });
  }

  void allocate(int64_t n) override {
    const GdnShape& g = hybrid_config(cfg_).gdn;
    gqa_ = std::make_unique<GqaAttention>(be_, cfg_, heads_, n);
    qkv_ = ActBuffer(be_, n * g.channels());
    z_ = ActBuffer(be_, n * g.value_dim());
    core_ = ActBuffer(be_, n * g.value_dim());
    alpha_ = ActBuffer(be_, n * g.n_v_heads);
    beta_ = ActBuffer(be_, n * g.n_v_heads);
    ba_ = ActBuffer(be_, n * 2 * g.n_v_heads);
    sorted_ = ActBuffer(be_, n * cfg_.n_embd);
    if (mtp_) allocate_nextn(n);
  }

  void begin_step(const Batch& /*b*/, const BatchPlacement& /*place*/) override { states_ready_ = false; }

  const Layer& at(int layer) const {
    return layer == cfg_.n_layer ? mtp_->block : layers_[static_cast<size_t>(layer - first_)];
  }

  void attention(const LayerRows& r, Act y) override {
    const Layer& L = at(r.layer);
    const Act xb = norm_rows(r, L.attn_norm);
    if (!hybrid_config(cfg_).is_recurrent(r.layer)) {
      const LayerRows rows{r.batch, r.place, r.kv, r.layer, cache_index_[static_cast<size_t>(r.layer)], r.r0, r.n};
      gqa_->run(be_, L.attn, rows, xb, y);
      return;
    }
    if (!states_ready_) prepare_states(r);
    linear_attention(r, L.lin, xb, y);
  }

  void ffn(const LayerRows& r, Act y) override {
    const Layer& L = at(r.layer);
    feed_forward(L.dense, L.moe, FfnActivation::Silu, norm_rows(r, L.ffn_norm), r.n, y);
  }

  // Once per step, before its first Gated DeltaNet block: the rows grouped by sequence (in position order,
  // each sequence's positions consecutive) and each sequence's state made ready — reset at position 0,
  // restored from its checkpoint where the step starts there (a rollback), checkpointed when the step feeds it
  // more than one row (a later rollback's point).
  void prepare_states(const LayerRows& r);
  void linear_attention(const LayerRows& r, const Linear& L, Act xb, Act y);

  void log_fusion() const override {
    fmt::print(stderr, "fusion: {}: Gated DeltaNet layers run as one operator (conv, gates, recurrence); the "
                       "projections, norms and attention are not fused\n", cfg_.arch);
  }

  const GqaHeads heads_;
  std::vector<int> cache_index_;  // per block: its KV layer (attention) or state layer (Gated DeltaNet)
  int n_attn_ = 0, n_rec_ = 0;
  std::vector<Layer> layers_;
  std::unique_ptr<MtpBlock<Layer>> mtp_;
  std::unique_ptr<GqaAttention> gqa_;
  ActBuffer qkv_, z_, core_, alpha_, beta_, ba_, sorted_;
  // This step's rows by sequence: order_[i] is the batch row (from r.r0) at sorted place i; runs_ each
  // sequence's stretch of it with its state slot.
  struct Run {
    int64_t first, n;
    int32_t slot;
  };
  std::vector<int64_t> order_;
  std::vector<Run> runs_;
  bool in_order_ = true;
  bool states_ready_ = false;
  std::vector<GdnSequence> seqs_;
};

void HybridLayers::prepare_states(const LayerRows& r) {
  const Batch& b = r.batch;
  order_.resize(static_cast<size_t>(r.n));
  std::iota(order_.begin(), order_.end(), 0);
  std::stable_sort(order_.begin(), order_.end(), [&](int64_t x, int64_t y) {
    const int32_t sx = b.seq_ids[r.r0 + x], sy = b.seq_ids[r.r0 + y];
    return sx != sy ? sx < sy : b.positions[r.r0 + x] < b.positions[r.r0 + y];
  });
  in_order_ = true;
  runs_.clear();
  for (int64_t i = 0; i < r.n; i++) {
    const int64_t row = r.r0 + order_[static_cast<size_t>(i)];
    in_order_ = in_order_ && order_[static_cast<size_t>(i)] == i;
    if (runs_.empty() || b.seq_ids[r.r0 + order_[static_cast<size_t>(runs_.back().first)]] != b.seq_ids[row]) {
      runs_.push_back({i, 0, r.place.state_slots[row]});
    } else {
      const int64_t prev = r.r0 + order_[static_cast<size_t>(i - 1)];
      if (b.positions[row] != b.positions[prev] + 1)
        throw Error(fmt::format("sequence {}: a step's positions must follow one another for the linear-attention "
                                "layers ({} after {})",
                                b.seq_ids[row], b.positions[row], b.positions[prev]));
    }
    runs_.back().n++;
  }
  KvStore& kv = r.kv;
  for (const Run& run : runs_) {
    const int64_t row = r.r0 + order_[static_cast<size_t>(run.first)];
    const int32_t seq = b.seq_ids[row];
    const int64_t first = b.positions[row];
    if (run.slot < 0 || run.slot >= kv.n_state_slots())
      throw Error(fmt::format("sequence {} holds no recurrent-state slot: the scheduler allocates one", seq));
    KvStore::StateMark& m = kv.mark(run.slot);
    if (first == 0)
      kv.reset_state(run.slot);
    else if (first == m.checkpoint && first != m.pos)
      kv.restore_state(run.slot);
    else if (first != m.pos)
      throw Error(fmt::format("sequence {}: its recurrent state holds positions [0, {}) (checkpoint {}), but the step "
                              "starts at {}",
                              seq, m.pos, m.checkpoint, first));
    if (run.n > 1) kv.checkpoint_state(run.slot);
    m.pos = first + run.n;
  }
  states_ready_ = true;
}

void HybridLayers::linear_attention(const LayerRows& r, const Linear& L, Act xb, Act y) {
  const GdnShape& g = hybrid_config(cfg_).gdn;
  const int64_t n = r.n, dim = cfg_.n_embd, hv = g.n_v_heads;
  Act x = xb;
  if (!in_order_) {  // the step's rows in sequence order (drafts come after every request's rows)
    be_.gather_rows(sorted_, xb, order_.data(), n, dim);
    x = sorted_;
  }
  be_.matmul(L.qkv, x, n, qkv_);
  be_.matmul(L.z, x, n, z_);
  if (L.ba.present()) {
    // Qwen3-Next's ssm_ba: per key head, the beta of its value heads, then their alpha.
    const int64_t per = hv / g.n_k_heads;
    be_.matmul(L.ba, x, n, ba_);
    be_.copy(beta_, per, ba_, 2 * per, n * g.n_k_heads, per);
    be_.copy(alpha_, per, ba_ + per, 2 * per, n * g.n_k_heads, per);
  } else {
    be_.matmul(L.beta, x, n, beta_);
    be_.matmul(L.alpha, x, n, alpha_);
  }
  const int rec = cache_index_[static_cast<size_t>(r.layer)];
  seqs_.clear();
  for (const Run& run : runs_) seqs_.push_back({run.first, run.n, r.kv.state(rec, run.slot)});
  ops::gated_delta_net(be_, {.shape = g,
                             .params = {L.conv_w.data(), L.dt_bias.data(), L.a.data()},
                             .qkv = qkv_,
                             .alpha = alpha_,
                             .beta = beta_,
                             .seqs = seqs_.data(),
                             .n_seqs = static_cast<int>(seqs_.size()),
                             .out = core_});
  // The gated norm: rmsnorm(o) per value head times silu(z), then the output projection.
  be_.rmsnorm(core_, L.norm.data(), core_, n * hv, g.head_dim, cfg_.rms_eps);
  be_.silu_mul(z_, core_, n * g.value_dim());
  if (in_order_) {
    be_.matmul(L.out, z_, n, y);
  } else {
    be_.matmul(L.out, z_, n, sorted_);
    be_.scatter_rows(y, sorted_, order_.data(), n, dim);
  }
}

std::unique_ptr<Model> make_hybrid(const GgufFile& f, Backend& be, const ModelOptions& o, ModelConfig c) {
  auto m = std::make_unique<HybridLayers>(be, o, std::move(c));
  m->init(f, o);
  return m;
}

}  // namespace

std::unique_ptr<Model> make_qwen_hybrid(const GgufFile& f, Backend& be, const ModelOptions& o, ModelConfig c) {
  return make_hybrid(f, be, o, std::move(c));
}

namespace {

// Deterministic values in [center - spread, center + spread) (F32, exactly as written; integer hashing, no libm):
// norm weights that differ per block and element, so that a block reading another's norm shows in the logits.
std::vector<float> around(int64_t n, float center, float spread, int64_t salt) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i++) {
    const uint64_t h = (static_cast<uint64_t>(i) * 2654435761u + static_cast<uint64_t>(salt) * 40503u) % 1024u;
    v[static_cast<size_t>(i)] = center + spread * (static_cast<float>(h) / 512.0f - 1.0f);
  }
  return v;
}

void synth_hybrid_keys(SynthFile& out, int64_t blocks, int64_t rope_dims) {
  const SynthShape& s = out.shape();
  const SynthHybrid& y = synth_hybrid(s);
  const bool moe = s.dec.experts > 0;
  synth_sizes(out, blocks, s.kv_heads, rope_dims, s.dec.rope_base, 1e-6f);
  out.u32("attention.key_length", s.dec.head_dim);
  out.u32("attention.value_length", s.dec.head_dim);
  if (s.arch != "qwen3next") {  // the text sections of the multi-section RoPE: 11, 11, 10 of 32 pairs, scaled
    const int64_t pairs = rope_dims / 2, a = (pairs + 2) / 3, b = (pairs - a + 1) / 2;
    out.writer().set(s.arch + ".rope.dimension_sections",
                     GgufValue::array(GgufValueType::INT32, {GgufValue::i32(static_cast<int32_t>(a)),
                                                             GgufValue::i32(static_cast<int32_t>(b)),
                                                             GgufValue::i32(static_cast<int32_t>(pairs - a - b)),
                                                             GgufValue::i32(0)}));
  }
  out.u32("ssm.conv_kernel", y.d_conv);
  out.u32("ssm.state_size", y.state);
  out.u32("ssm.group_count", y.k_heads);
  out.u32("ssm.time_step_rank", y.v_heads);
  out.u32("ssm.inner_size", y.v_heads * y.state);
  out.u32("full_attention_interval", y.interval);
  if (y.nextn > 0) out.u32("nextn_predict_layers", y.nextn);
  if (moe) {
    out.u32("expert_count", s.dec.experts);
    out.u32("expert_used_count", s.dec.experts_used);
    out.u32("expert_feed_forward_length", s.dec.ffn_expert);
    out.u32("expert_shared_feed_forward_length", s.dec.ffn_shared);
  }
}

void synth_linear_block(SynthFile& out, const std::string& p, int64_t l) {
  const SynthShape& s = out.shape();
  const SynthHybrid& y = synth_hybrid(s);
  const int64_t key = y.k_heads * y.state, value = y.v_heads * y.state, channels = 2 * key + value;
  const float in_std = SynthFile::fan_in(s.dim);
  out.random(p + "attn_qkv.weight", {s.dim, channels}, in_std);
  out.random(p + "attn_gate.weight", {s.dim, value}, in_std);
  // F32, as the converter writes it and llama-quantize keeps it (ggml's ssm_conv reads floats).
  out.values(p + "ssm_conv1d.weight", around(y.d_conv * channels, 0.0f, 0.6f, l), {y.d_conv, channels});
  out.values(p + "ssm_dt.bias", around(y.v_heads, 0.5f, 1.0f, l));
  out.values(p + "ssm_a", around(y.v_heads, -1.0f, 0.6f, l + 7));  // -exp(A_log): decays of 0.2 .. 0.9
  if (s.arch == "qwen3next") {
    out.random(p + "ssm_ba.weight", {s.dim, 2 * y.v_heads}, in_std);
  } else {
    out.random(p + "ssm_beta.weight", {s.dim, y.v_heads}, in_std);
    out.random(p + "ssm_alpha.weight", {s.dim, y.v_heads}, in_std);
  }
  out.values(p + "ssm_norm.weight", around(y.state, 1.0f, 0.2f, l + 3));
  out.random(p + "ssm_out.weight", {value, s.dim}, out.residual_std(value));
}

void synth_attention_block(SynthFile& out, const std::string& p, int64_t l) {
  const SynthShape& s = out.shape();
  const int64_t head = s.dec.head_dim, q_dim = s.heads * head, kv_dim = s.kv_heads * head;
  out.qkv(p, 2 * q_dim, kv_dim);
  out.values(p + "attn_q_norm.weight", around(head, 1.0f, 0.2f, l + 5));
  out.values(p + "attn_k_norm.weight", around(head, 1.0f, 0.2f, l + 11));
  out.random(p + "attn_output.weight", {q_dim, s.dim}, out.residual_std(q_dim));
}

}  // namespace

// llama.cpp's converter's layout (conversion/qwen.py): the fused q/k/v projection and z of the Gated DeltaNet
// blocks, ssm_a already -exp(A_log), norms already 1 + w (written as the values a checkpoint would give),
// Qwen3.5's separate ssm_beta / ssm_alpha or Qwen3-Next's ssm_ba; every interval-th block gated attention;
// the MTP block (a full-attention block with its nextn tensors) after the trunk.
void synth_qwen_hybrid(SynthFile& out) {
  const SynthShape& s = out.shape();
  const SynthDecoder& d = s.dec;
  const SynthHybrid& y = synth_hybrid(s);
  if (d.head_dim <= 0 || y.state <= 0 || y.k_heads <= 0 || y.v_heads % y.k_heads != 0 || s.heads % s.kv_heads != 0)
    throw Error(fmt::format("{}: a hybrid shape needs a head size, a state size, and value heads grouping over key "
                            "heads",
                            s.arch));
  const int64_t blocks = s.layers + y.nextn;
  synth_hybrid_keys(out, blocks, d.head_dim / 4);
  const float in_std = SynthFile::fan_in(s.dim);
  for (int64_t l = 0; l < blocks; l++) {
    const std::string p = fmt::format("blk.{}.", l);
    out.values(p + "attn_norm.weight", around(s.dim, 1.0f, 0.2f, l));
    if (l < s.layers && (l + 1) % y.interval != 0)
      synth_linear_block(out, p, l);
    else
      synth_attention_block(out, p, l);
    out.values(p + "post_attention_norm.weight", around(s.dim, 1.0f, 0.2f, l + 13));
    if (d.experts > 0) {
      out.random(p + "ffn_gate_inp.weight", {s.dim, d.experts}, in_std);
      out.gated_ffn(p, "_exps", d.ffn_expert, {d.experts});
      out.gated_ffn(p, "_shexp", d.ffn_shared);
      out.random(p + "ffn_gate_inp_shexp.weight", {s.dim}, in_std);
    } else {
      out.gated_ffn(p, "", s.ffn);
    }
    if (l >= s.layers) {
      out.random(p + "nextn.eh_proj.weight", {2 * s.dim, s.dim}, SynthFile::fan_in(2 * s.dim));
      out.values(p + "nextn.enorm.weight", around(s.dim, 1.0f, 0.2f, l + 17));
      out.values(p + "nextn.hnorm.weight", around(s.dim, 1.0f, 0.2f, l + 19));
      out.norm(p + "nextn.shared_head_norm.weight", s.dim);
    }
  }
}

SynthShape qwen_hybrid_shape(const char* arch, const QwenHybridShape& h) {
  SynthShape s = synth_shape(arch, h.dim, h.layers, h.heads, h.kv_heads, h.ffn, h.vocab, 262144,
                             SynthDecoder{.head_dim = h.head_dim, .rope_base = h.rope_base, .experts = h.experts,
                                          .experts_used = h.used, .ffn_expert = h.ffn_expert,
                                          .ffn_shared = h.ffn_shared, .embed_std = h.embed_std});
  s.family = SynthHybrid{.k_heads = h.k_heads, .v_heads = h.v_heads, .state = h.state, .nextn = h.nextn};
  return s;
}

}  // namespace kestrel

// DeepSeek-V2/V3/R1 (GGUF architecture `deepseek2`), top to bottom:
//   x = embed(tokens)
//   for each layer:
//     x += MLA attention(rmsnorm(x))              (mla_attention.h: the latent cache)
//     x += dense SwiGLU FFN(rmsnorm(x))           (the leading layers)
//          or sum_k w_k * expert_k(h) + shared experts(h)   (DeepSeekMoE)
//   logits = rmsnorm(x) . Wout     (only for rows that asked)
// V3's multi-token-prediction block (blk.{n_layer}.nextn.*), when loaded:
//   x = eh_proj . [rmsnorm(embed(token)) | rmsnorm(hidden)], one full block,
//   then the head behind its own norm; its cache is one more latent layer.
#include <fmt/format.h>

#include <cmath>

#include "model/arch/families.h"
#include "model/hparams_common.h"
#include "model/layer_stack.h"
#include "model/mla_attention.h"

namespace kestrel {
namespace {

constexpr LayerRecipe kRecipe{.attention = LayerRecipe::Attention::Mla};

// MLA's sizes. Files from before llama.cpp split attn_kv_b give the per-head
// sizes in key_length / value_length; newer ones there give the latent
// cache's and the per-head sizes in key_length_mla / value_length_mla.
void read_mla(HparamReader& h, ModelConfig& c) {
  // Conversions since the attn_kv_b split write 1 (the latent is one shared
  // KV head), older ones n_head: both describe the same math.
  if (const auto kv = h.opt_int("attention.head_count_kv"); kv && *kv != c.n_head && *kv != 1)
    throw h.bad("attention.head_count_kv", fmt::format("= {}: MLA has 1 or {} (one per query head)", *kv, c.n_head));
  MlaConfig& m = c.mla;
  m.q_lora_rank = static_cast<int>(h.int_or("attention.q_lora_rank", 0));
  m.kv_lora_rank = static_cast<int>(h.need_int("attention.kv_lora_rank"));
  m.qk_rope = static_cast<int>(h.need_int("rope.dimension_count"));
  const bool split = h.has("attention.key_length_mla");
  const int head_k = static_cast<int>(h.need_int(split ? "attention.key_length_mla" : "attention.key_length"));
  m.v_head = static_cast<int>(h.need_int(split ? "attention.value_length_mla" : "attention.value_length"));
  if (split) {
    // The latent cache's row: kv_lora + rope keys, kv_lora values.
    const auto k = h.opt_int("attention.key_length"), v = h.opt_int("attention.value_length");
    if (k && *k != m.kv_lora_rank + m.qk_rope)
      throw h.bad("attention.key_length",
                  fmt::format("= {}, expected kv_lora_rank + rope ({})", *k, m.kv_lora_rank + m.qk_rope));
    if (v && *v != m.kv_lora_rank)
      throw h.bad("attention.value_length", fmt::format("= {}, expected kv_lora_rank ({})", *v, m.kv_lora_rank));
  }
  m.qk_nope = head_k - m.qk_rope;
  if (m.qk_nope <= 0 || m.qk_rope % 2)
    throw h.bad("rope.dimension_count",
                fmt::format("= {} must be even and less than the key size {}", m.qk_rope, head_k));
  c.head_dim = head_k;
  c.n_head_kv = c.n_head;  // as a multi-head model once decompressed
  c.query_temp.scale = static_cast<float>(h.float_or("attention.temperature_scale", 0.0));
  if (c.query_temp.on()) {
    c.query_temp.length = static_cast<int>(h.need_int("attention.temperature_length"));
    if (c.query_temp.length <= 0) throw h.bad("attention.temperature_length", "must be positive");
  } else if (h.has("attention.temperature_length")) {
    h.need_int("attention.temperature_length");  // read: without a scale it changes nothing
  }
}

}  // namespace

void read_deepseek_experts(HparamReader& h, ModelConfig& c) {
  MoeConfig& e = c.moe;
  read_expert_counts(h, c);
  e.n_ff_expert = h.need_int("expert_feed_forward_length");
  e.n_ff_shared = h.int_or("expert_shared_count", 0) * e.n_ff_expert;
  const double scale = h.float_or("expert_weights_scale", 1.0);
  e.routing.scale = scale == 0.0 ? 1.0f : static_cast<float>(scale);  // llama.cpp: 0 means "do not scale"
  e.routing.normalize = h.opt_bool("expert_weights_norm").value_or(false);
}

void synth_deepseek_experts(SynthFile& out, ExpertGating gating) {
  const SynthDeepseek& d = out.shape().ds;
  out.u32("expert_feed_forward_length", d.ffn_expert);
  out.u32("expert_count", d.experts);
  out.u32("expert_used_count", d.experts_used);
  out.u32("expert_shared_count", d.experts_shared);
  out.f32("expert_weights_scale", d.weights_scale);
  out.boolean("expert_weights_norm", d.norm_weights);
  out.u32("expert_gating_func", static_cast<int64_t>(gating));
}

namespace {

// DeepSeekMoE: softmax (V2) or sigmoid (V3) gating, a selection bias, the
// chosen weights optionally renormalised and scaled, expert groups, shared
// experts as wide as expert_shared_count routed ones, dense leading layers.
void read_deepseek_moe(HparamReader& h, ModelConfig& c) {
  MoeConfig& e = c.moe;
  MoeRouting& r = e.routing;
  r.n_expert = static_cast<int>(h.int_or("expert_count", 0));
  e.n_dense_lead = static_cast<int>(h.int_or("leading_dense_block_count", r.n_expert ? 0 : c.n_layer));
  if (r.n_expert == 0) return;
  read_deepseek_experts(h, c);
  const int64_t gating = h.int_or("expert_gating_func", 1);  // V2 files predate the key: softmax
  if (gating != 1 && gating != 2)
    throw h.bad("expert_gating_func", fmt::format("= {}: not 1 (softmax) or 2 (sigmoid)", gating));
  r.gating = static_cast<ExpertGating>(gating);
  r.n_group = static_cast<int>(std::max<int64_t>(1, h.int_or("expert_group_count", 1)));
  r.n_group_used = static_cast<int>(std::max<int64_t>(1, h.int_or("expert_group_used_count", r.n_group)));
  if (r.n_group > 64 || r.n_expert % r.n_group != 0)
    throw h.bad("expert_group_count",
                fmt::format("= {} must divide expert_count {} (at most 64 groups)", r.n_group, r.n_expert));
  if (r.n_group_used > r.n_group || r.n_used > r.n_group_used * (r.n_expert / r.n_group))
    throw h.bad("expert_group_used_count", fmt::format("= {} cannot hold {} experts", r.n_group_used, r.n_used));
  if (e.n_dense_lead > c.n_layer)
    throw h.bad("leading_dense_block_count", fmt::format("= {} exceeds block_count {}", e.n_dense_lead, c.n_layer));
}

// RoPE on the rotary dims only, adjacent pairs (llama.cpp's "norm" mode for deepseek2).
void read_deepseek_rope(HparamReader& h, ModelConfig& c) {
  c.rope.style = RopeStyle::Adjacent;
  c.rope.n_rot = c.mla.qk_rope;
  c.rope.freq_base = static_cast<float>(h.float_or("rope.freq_base", 10000.0));
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const std::string scaling = h.opt_string("rope.scaling.type").value_or("none");
  if (scaling == "yarn") {
    const double factor = h.float_or("rope.scaling.factor", 1.0);
    if (!(factor >= 1.0)) throw h.bad("rope.scaling.factor", fmt::format("= {} must be at least 1 for YaRN", factor));
    const auto log_mul = static_cast<float>(h.float_or("rope.scaling.yarn_log_multiplier", 0.0));
    c.rope.freq_scale = static_cast<float>(1.0 / factor);
    read_yarn(h, c, c.rope);
    // DeepSeek's YaRN keeps the rotated dims at unit scale (ggml multiplies
    // cos/sin by 1 + 0.1 ln(factor); llama.cpp passes attn_factor to cancel
    // it) and moves the correction to the softmax: mscale^2 with HF's
    // mscale = 1 + 0.1 * mscale_all_dim * ln(factor). llama.cpp's converter
    // writes yarn_log_multiplier = 0.1 * mscale_all_dim for deepseek2 (and
    // its loader divides by 0.1 again), so here mscale = 1 + log_mul * ln(factor).
    const float ln_factor = std::log(static_cast<float>(factor));
    c.rope.attn_factor = 1.0f / (1.0f + 0.1f * ln_factor);
    const float mscale = 1.0f + log_mul * ln_factor;
    c.attn_scale *= mscale * mscale;
  } else if (scaling != "none") {
    throw h.bad("rope.scaling.type", fmt::format("= '{}' is not supported for deepseek2 (none or yarn)", scaling));
  } else if (const auto factor = h.opt_float("rope.scaling.factor"); factor && *factor != 1.0 && *factor != 0.0) {
    throw h.bad("rope.scaling.factor", fmt::format("= {} without a scaling type", *factor));
  }
}

ModelConfig read(HparamReader& h, const ModelOptions&) {
  ModelConfig c = read_common(h, {.rms_eps = 1e-6, .n_ctx = 4096, .mtp_blocks = true});
  read_mla(h, c);
  read_deepseek_moe(h, c);
  read_deepseek_rope(h, c);
  return c;
}

class Deepseek2 final : public LayerStack {
 public:
  Deepseek2(Backend& be, const ModelOptions& o, ModelConfig c)
      : LayerStack(be, o, std::move(c)), mode_(o.mla), heads_(split_mla_heads(cfg_, shard_)) {
    if ((shard_.split() || shard_.experts_split() || shard_.pipelined()) && o.load_mtp)
      throw Error("the multi-token-prediction block cannot run split across ranks yet: drop --spec mtp or --parallel");
    // A shared-indexer layer (GLM-5) attends to what the previous full layer chose: that layer must run here.
    if (first_ > 0 && cfg_.mla.indexer.shares(first_))
      throw Error(fmt::format("a pipeline stage cannot start at layer {}: it reuses layer {}'s sparse-attention "
                              "selection, which another rank makes (choose another pp)",
                              first_, first_ - 1));
  }

  // The latent cache of this stage's layers; the MTP block, when loaded,
  // caches in one more layer after the trunk's.
  KvLayout kv_layout() const override { return mla_kv_layout(cfg_, end_ - first_ + mtp_layers()); }

 private:
  struct Layer {
    std::vector<float> attn_norm, ffn_norm;
    MlaWeights attn;
    FfnWeights dense;  // the leading layers
    MoeWeights moe;    // or router + experts + shared experts
  };

  Layer load_block(const WeightLoader& ld, int l) {
    const std::string p = layer_prefix(l);
    const int64_t dim = cfg_.n_embd;
    Layer L;
    L.attn_norm = ld.require_vector(p + "attn_norm.weight", dim);
    // MTP blocks attend densely; GLM-5's shared-indexer layers reuse the previous layer's selection.
    L.attn = load_mla(ld, be_, p, cfg_, heads_, shard_, l < cfg_.n_layer && !cfg_.mla.indexer.shares(l));
    L.ffn_norm = ld.require_vector(p + "ffn_norm.weight", dim);
    if (moe_layer(l))
      L.moe = load_moe(ld, be_, p, dim, cfg_.moe, shard_);
    else
      L.dense = load_ffn(ld, be_, p, "", dim, cfg_.n_ff, false, shard_);
    return L;
  }

  void load_layer(const WeightLoader& ld, int l) override { layers_.push_back(load_block(ld, l)); }

  // The first MTP block (blk.{n_layer}) when asked for, with llama.cpp's
  // `nextn` tensor names; the blocks not loaded take no part in the trunk's math.
  void load_extra(const WeightLoader& ld, const ModelOptions& o) override {
    mtp_ = load_nextn_block<Layer>(ld, o, [&](int l) { return load_block(ld, l); });
  }

  void allocate(int64_t max_rows) override {
    mla_ = std::make_unique<MlaBlock>(be_, cfg_, heads_, mode_, max_rows);
    if (mtp_) allocate_nextn(max_rows);
  }

  const Layer& at(int layer) const {
    return layer == cfg_.n_layer ? mtp_->block : layers_[static_cast<size_t>(layer - first_)];
  }

  void begin_step(const Batch& b, const BatchPlacement& place) override { mla_->begin_step(b, place); }

  void attention(const LayerRows& r, Act y) override {
    const Layer& L = at(r.layer);
    mla_->run(be_, L.attn, r, norm_rows(r, L.attn_norm), y);
  }

  void ffn(const LayerRows& r, Act y) override {
    const Layer& L = at(r.layer);
    feed_forward(L.dense, L.moe, FfnActivation::Silu, norm_rows(r, L.ffn_norm), r.n, y);
  }

  void log_fusion() const override {
    int fused = 0;
    for (const auto& L : layers_)
      if (const FfnWeights* f = L.moe.present() ? L.moe.first_held() : &L.dense) fused += be_.fuses(f->gate, f->up);
    fmt::print(stderr, "fusion: ffn_gate+ffn_up+SwiGLU (dense, shared and routed experts): {} of {} layers\n", fused,
               cfg_.n_layer);
    fmt::print(stderr, "fusion: attn_q(_a)+attn_kv_a_mqa: one input pass per layer; MLA attention: {}\n",
               mla_->mode_name());
  }

  const MlaAttention mode_;
  const MlaHeads heads_;
  std::vector<Layer> layers_;  // this rank's, from first_
  std::unique_ptr<MtpBlock<Layer>> mtp_;
  std::unique_ptr<MlaBlock> mla_;
};

std::unique_ptr<Model> make(const GgufFile& f, Backend& be, const ModelOptions& o, ModelConfig c) {
  auto m = std::make_unique<Deepseek2>(be, o, std::move(c));
  m->init(f, o);
  return m;
}

// The deepseek2 tensors, in llama.cpp's names and layouts (split attn_k_b /
// attn_v_b, 3-D expert tensors); MTP blocks last, each a full block plus
// its `nextn` tensors (the head and embedding shared with the trunk).
void synth_layers(SynthFile& out) {
  const SynthShape& s = out.shape();
  const SynthDeepseek& d = s.ds;
  const float in_std = SynthFile::fan_in(s.dim);
  const int64_t hk = d.qk_nope + d.qk_rope;
  for (int64_t l = 0; l < s.layers + d.nextn; l++) {
    const std::string p = fmt::format("blk.{}.", l);
    if (l >= s.layers) {
      out.random(p + "nextn.eh_proj.weight", {2 * s.dim, s.dim}, SynthFile::fan_in(2 * s.dim));
      out.norm(p + "nextn.enorm.weight", s.dim);
      out.norm(p + "nextn.hnorm.weight", s.dim);
      out.norm(p + "nextn.shared_head_norm.weight", s.dim);
    }
    out.norm(p + "attn_norm.weight", s.dim);
    if (d.q_lora > 0) {
      out.random(p + "attn_q_a.weight", {s.dim, d.q_lora}, in_std);
      out.norm(p + "attn_q_a_norm.weight", d.q_lora);
      out.random(p + "attn_q_b.weight", {d.q_lora, s.heads * hk}, SynthFile::fan_in(d.q_lora));
    } else {
      out.random(p + "attn_q.weight", {s.dim, s.heads * hk}, in_std);
    }
    out.random(p + "attn_kv_a_mqa.weight", {s.dim, d.kv_lora + d.qk_rope}, in_std);
    out.norm(p + "attn_kv_a_norm.weight", d.kv_lora);
    out.random(p + "attn_k_b.weight", {d.qk_nope, d.kv_lora, s.heads}, SynthFile::fan_in(d.qk_nope));
    out.random(p + "attn_v_b.weight", {d.kv_lora, d.v_head, s.heads}, SynthFile::fan_in(d.kv_lora));
    out.random(p + "attn_output.weight", {s.heads * d.v_head, s.dim},
               out.residual_std(s.heads * d.v_head));
    out.norm(p + "ffn_norm.weight", s.dim);
    if (l < d.dense_lead || d.experts == 0) {
      out.gated_ffn(p, "", s.ffn);
      continue;
    }
    out.random(p + "ffn_gate_inp.weight", {s.dim, d.experts}, in_std);
    if (d.selection_bias) out.random(p + "exp_probs_b.bias", {d.experts}, 0.05f);
    out.gated_ffn(p, "_exps", d.ffn_expert, {d.experts});
    if (d.experts_shared > 0) out.gated_ffn(p, "_shexp", d.ffn_expert * d.experts_shared);
  }
}

void synth(SynthFile& out) {
  const SynthShape& s = out.shape();
  const SynthDeepseek& d = s.ds;
  if (d.experts % d.groups != 0 || d.experts_used > d.experts || d.dense_lead > s.layers)
    throw Error("deepseek2: experts must split into the groups, and the used experts and dense layers must fit");
  // MLA: one latent "head" of KV.
  synth_sizes(out, s.layers + d.nextn, 1, d.qk_rope, 10000.0f, 1e-6f);
  out.u32("leading_dense_block_count", d.dense_lead);
  // Always, 0 without a query bottleneck (the V2-Lite form), as llama.cpp's own model saver writes it: its
  // loader requires the key unless the layer count is one of the Lite models' (26, 27).
  out.u32("attention.q_lora_rank", d.q_lora);
  out.u32("attention.kv_lora_rank", d.kv_lora);
  out.u32("attention.key_length", d.kv_lora + d.qk_rope);  // the latent cache's sizes
  out.u32("attention.value_length", d.kv_lora);
  out.u32("attention.key_length_mla", d.qk_nope + d.qk_rope);  // per head
  out.u32("attention.value_length_mla", d.v_head);
  synth_deepseek_experts(out, d.sigmoid ? ExpertGating::Sigmoid : ExpertGating::Softmax);
  if (d.groups > 1) {
    out.u32("expert_group_count", d.groups);
    out.u32("expert_group_used_count", d.groups_used);
  }
  if (d.nextn > 0) out.u32("nextn_predict_layers", d.nextn);
  if (d.temp_scale != 0) {
    out.f32("attention.temperature_scale", d.temp_scale);
    out.u32("attention.temperature_length", d.temp_length);
  }
  if (d.yarn_factor > 0) {
    out.str("rope.scaling.type", "yarn");
    out.f32("rope.scaling.factor", d.yarn_factor);
    out.u32("rope.scaling.original_context_length", d.yarn_orig_ctx);
    out.f32("rope.scaling.yarn_log_multiplier", d.yarn_log_mul);
  }
  synth_layers(out);
}

SynthShape preset_shape(const std::string& preset) {
  SynthShape s;
  s.arch = "deepseek2";
  SynthDeepseek& d = s.ds;
  if (preset == "tiny" || preset == "tiny-v3") {
    s.dim = 64, s.layers = 3, s.heads = 4, s.ffn = 128, s.vocab = 512, s.ctx = 4096;
    d.kv_lora = 32, d.qk_nope = 16, d.qk_rope = 8, d.v_head = 16;
    d.experts = 8, d.experts_used = 2, d.experts_shared = 2, d.ffn_expert = 32;
    if (preset == "tiny-v3") {
      d.q_lora = 48, d.experts = 16, d.experts_used = 4, d.experts_shared = 1, d.groups = 4, d.groups_used = 2;
      d.sigmoid = d.selection_bias = d.norm_weights = true, d.weights_scale = 2.5f;
      d.yarn_factor = 4.0f, d.yarn_orig_ctx = 1024;
    }
  } else if (preset == "attn-bench") {
    // V3's attention at its real widths in two dense layers with a narrow FFN: deepseek32's attn-bench
    // without the indexer (docs/benchmarks.md compares the two).
    s.dim = 7168, s.layers = 2, s.heads = 128, s.ffn = 2048, s.vocab = 32000, s.ctx = 163840;
    d.q_lora = 1536, d.kv_lora = 512, d.qk_nope = 128, d.qk_rope = 64, d.v_head = 128;
    d.dense_lead = 2, d.experts = 8, d.experts_used = 2, d.experts_shared = 1, d.ffn_expert = 256;  // all dense
    d.sigmoid = d.selection_bias = d.norm_weights = true, d.weights_scale = 2.5f;
    d.yarn_factor = 40.0f, d.yarn_orig_ctx = 4096, d.yarn_log_mul = 0.1f;
  } else if (preset == "lite") {  // DeepSeek-V2-Lite
    s.dim = 2048, s.layers = 27, s.heads = 16, s.ffn = 10944, s.vocab = 102400, s.ctx = 163840;
    d.kv_lora = 512, d.qk_nope = 128, d.qk_rope = 64, d.v_head = 128;
    d.experts = 64, d.experts_used = 6, d.experts_shared = 2, d.ffn_expert = 1408;
    d.yarn_factor = 40.0f, d.yarn_orig_ctx = 4096, d.yarn_log_mul = 0.0707f;
  } else {  // v3-small, v3
    const bool full = preset == "v3";
    s.dim = full ? 7168 : 1024, s.layers = full ? 61 : 8, s.heads = full ? 128 : 16;
    s.ffn = full ? 18432 : 2816, s.vocab = full ? 129280 : 32000, s.ctx = 163840;
    d.q_lora = full ? 1536 : 384, d.kv_lora = 512, d.qk_nope = 128, d.qk_rope = 64, d.v_head = 128;
    d.dense_lead = full ? 3 : 1, d.experts = full ? 256 : 64, d.experts_used = 8, d.experts_shared = 1;
    d.ffn_expert = full ? 2048 : 256, d.groups = 8, d.groups_used = 4;
    d.sigmoid = d.selection_bias = d.norm_weights = true, d.weights_scale = 2.5f;
    d.yarn_factor = 40.0f, d.yarn_orig_ctx = 4096, d.yarn_log_mul = 0.1f;
  }
  s.kv_heads = s.heads;
  return s;
}

std::vector<SynthPreset> presets() {
  std::vector<SynthPreset> p;
  for (const char* name : {"tiny", "tiny-v3", "lite", "v3-small", "v3", "attn-bench"}) p.push_back({name, preset_shape(name)});
  return p;
}

}  // namespace

const Family& deepseek2_family() {
  static const Family f{"deepseek2", "DeepSeek-V2, V2-Lite, V2.5, V3, R1", kRecipe, read, make, synth, presets};
  return f;
}

}  // namespace kestrel

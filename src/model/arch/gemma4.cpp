// Gemma 4 (`gemma4`: Gemma-4-E2B, E4B, 26B-A4B, 31B), text, as llama.cpp's llama_model_gemma4:
//
//   x = embed(tokens) * sqrt(n_embd)
//   P = (rmsnorm((x . per_layer_model_proj) / sqrt(n_embd)) + per_layer_token_embd(tokens) * sqrt(n_pl)) / sqrt(2)
//                                         [E2B/E4B: n_pl floats per layer per token; the norm over each n_pl]
//   per layer l:
//     x += rmsnorm(GQA attention(rmsnorm(x)))
//          q and k head norms (weighted), a weightless norm of each v head, scores unscaled (1.0);
//          sliding layers (the file's pattern): the window, their own head size and KV heads, RoPE base
//          rope.freq_base_swa over rope.dimension_count_swa; full layers: "proportional" RoPE (rope_freqs
//          leaves all but a quarter of the pairs unrotated), attn_v absent: v from k's projection;
//          the last attention.shared_kv_layers layers: queries only, over the cache of the last earlier
//          layer of their kind (no cache of their own)
//     x += rmsnorm(GeGLU(rmsnorm(x)))      dense layers
//     x += rmsnorm(rmsnorm_1(GeGLU(norm(x))) + rmsnorm_2(experts(norm_2(x))))
//          MoE layers: the router reads rmsnorm(x) / sqrt(n_embd) * ffn_gate_inp.scale; softmax, top-k,
//          renormalised; GeGLU experts (ffn_gate_up_exps), each output times ffn_down_exps.scale
//     x += rmsnorm(proj(gelu(x . inp_gate) * P[l]))   [per-layer embeddings]
//     x *= layer_output_scale                       [where the file has it]
//   logits = cap * tanh(rmsnorm(x) . Wout / cap)    [final_logit_softcapping, 30 when the key is absent]
//
// Under tensor or expert parallelism a MoE layer's dense FFN runs whole on every rank, after the experts'
// sum (its norm and the experts' norm need both sums complete); its weights are a small share of the layer.
// Under pipeline parallelism a stage must hold the layers whose caches its shared layers read.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include "core/error.h"
#include "model/arch/families.h"
#include "model/arch/gemma4.h"
#include "model/gqa_attention.h"
#include "model/hparams_common.h"

namespace kestrel {
namespace {

constexpr LayerRecipe kRecipe{.qk_norm = true, .post_norms = true, .ffn_act = FfnActivation::Gelu};

// A per-layer integer key given as one value or one per layer (llama.cpp's get_key_or_arr).
std::vector<int64_t> per_layer_ints(HparamReader& h, const std::string& key, int n_layer, std::optional<int64_t> dflt) {
  const GgufValue* v = h.file().find(h.arch() + "." + key);
  if (!v) {
    if (!dflt) throw h.bad(key, "is required for gemma4");
    return std::vector<int64_t>(static_cast<size_t>(n_layer), *dflt);
  }
  h.accept(key);
  std::vector<int64_t> out;
  if (v->type == GgufValueType::ARRAY) {
    const GgufArray& a = v->as_array();
    if (static_cast<int>(a.items.size()) != n_layer)
      throw h.bad(key, fmt::format("has {} entries for {} layers", a.items.size(), n_layer));
    for (const GgufValue& x : a.items) out.push_back(x.as_int());
  } else {
    out.assign(static_cast<size_t>(n_layer), v->as_int());
  }
  for (int l = 0; l < n_layer; l++)
    if (out[l] <= 0 || out[l] > (int64_t{1} << 20))
      throw h.bad(key, fmt::format("= {} at layer {} is not a valid size", out[l], l));
  return out;
}

// The one value a per-layer key takes on the layers of one kind (sliding or not); default when there are none.
int value_on(HparamReader& h, const std::string& key, const std::vector<int64_t>& v, const ModelConfig& c,
             bool sliding, int dflt) {
  std::optional<int64_t> seen;
  for (int l = 0; l < c.n_layer; l++) {
    if (c.is_sliding(l) != sliding) continue;
    if (seen && *seen != v[l])
      throw h.bad(key, fmt::format("differs between the {} layers ({} and {}): not a Gemma 4 layout",
                                   sliding ? "sliding" : "full", *seen, v[l]));
    seen = v[l];
  }
  return static_cast<int>(seen.value_or(dflt));
}

void check_heads(HparamReader& h, const ModelConfig& c, const char* key, int kv, int head_dim) {
  if (kv <= 0 || c.n_head % kv != 0)
    throw h.bad("attention.head_count_kv",
                fmt::format("= {}: {} attention heads cannot be grouped over it", kv, c.n_head));
  if (head_dim <= 0 || head_dim % 2 != 0)
    throw h.bad(key, fmt::format("= {}: the head size must be positive and even", head_dim));
}

ModelConfig read(HparamReader& h, const ModelOptions&) {
  ModelConfig c = read_common(h, {.rms_eps = 1e-6, .ffn_per_layer = true});
  c.both_ways_sliding_only = true;  // an image's rows see each other on the sliding layers only (llama.cpp's SWA_ONLY)
  Gemma4Config& g = family_part<Gemma4Config>(c.family);
  g.n_ff = per_layer_ints(h, "feed_forward_length", c.n_layer, std::nullopt);
  c.n_ff = *std::max_element(g.n_ff.begin(), g.n_ff.end());

  // Which layers slide: one flag per layer (the converter's layer_types).
  const std::string pkey = "attention.sliding_window_pattern";
  const GgufValue* pv = h.file().find(h.arch() + "." + pkey);
  if (!pv || pv->type != GgufValueType::ARRAY) throw h.bad(pkey, "is required for gemma4 (one flag per layer)");
  h.accept(pkey);
  const GgufArray& pa = pv->as_array();
  if (static_cast<int>(pa.items.size()) != c.n_layer)
    throw h.bad(pkey, fmt::format("has {} entries for {} layers", pa.items.size(), c.n_layer));
  c.sliding_window = static_cast<int32_t>(h.need_int("attention.sliding_window"));
  for (const GgufValue& x : pa.items) c.sliding_layers.push_back(x.as_bool() ? 1 : 0);

  // Heads: full layers' in ModelConfig, sliding layers' in g.
  const std::vector<int64_t> kv = per_layer_ints(h, "attention.head_count_kv", c.n_layer, c.n_head);
  c.head_dim = static_cast<int>(h.need_int("attention.key_length"));
  g.head_dim_sliding = static_cast<int>(h.need_int("attention.key_length_swa"));
  if (h.int_or("attention.value_length", c.head_dim) != c.head_dim)
    throw h.bad("attention.value_length", "must equal attention.key_length (Gemma 4)");
  if (h.int_or("attention.value_length_swa", g.head_dim_sliding) != g.head_dim_sliding)
    throw h.bad("attention.value_length_swa", "must equal attention.key_length_swa (Gemma 4)");
  g.n_head_kv_sliding = value_on(h, "attention.head_count_kv", kv, c, true, c.n_head);
  c.n_head_kv = value_on(h, "attention.head_count_kv", kv, c, false, g.n_head_kv_sliding);
  check_heads(h, c, "attention.key_length", c.n_head_kv, c.head_dim);
  check_heads(h, c, "attention.key_length_swa", g.n_head_kv_sliding, g.head_dim_sliding);

  // RoPE (NeoX halves): full layers over rope.dimension_count with rope_freqs; sliding layers their own
  // count and base, no scaling.
  read_rope(h, c, RopeStyle::NeoX);
  c.rope_sliding.n_rot = static_cast<int>(h.int_or("rope.dimension_count_swa", c.rope.n_rot));
  if (c.rope_sliding.n_rot <= 0 || c.rope_sliding.n_rot > g.head_dim_sliding || c.rope_sliding.n_rot % 2)
    throw h.bad("rope.dimension_count_swa",
                fmt::format("= {} must be even and at most the sliding head size {}", c.rope_sliding.n_rot,
                            g.head_dim_sliding));
  c.rope_sliding.freq_base = static_cast<float>(h.float_or("rope.freq_base_swa", 10000.0));
  if (!(c.rope_sliding.freq_base > 1.0f)) throw h.bad("rope.freq_base_swa", "must be above 1");
  c.rope_sliding.freq_scale = 1.0f;
  c.rope_sliding.ext_factor = 0.0f;

  c.embed_scale = std::sqrt(static_cast<float>(c.n_embd));
  c.attn_scale = 1.0f;  // Gemma 4 leaves the scores unscaled (its q/k norms set their size)
  c.final_softcap = static_cast<float>(h.float_or("final_logit_softcapping", 30.0));
  if (c.final_softcap < 0) throw h.bad("final_logit_softcapping", "must not be negative");

  const int64_t shared = h.int_or("attention.shared_kv_layers", 0);
  if (shared >= c.n_layer) throw h.bad("attention.shared_kv_layers", fmt::format("= {} leaves no layer a cache", shared));
  g.n_kv_layers = c.n_layer - static_cast<int>(shared);
  for (int l = g.n_kv_layers; l < c.n_layer; l++) {
    // llama.cpp: a shared sliding layer reads layer n_kv - 2, a shared full one layer n_kv - 1.
    const int src = g.kv_source(l, c.is_sliding(l));
    if (src < 0 || c.is_sliding(src) != c.is_sliding(l))
      throw h.bad("attention.shared_kv_layers",
                  fmt::format("= {}: layer {} ({}) would read layer {}'s cache, which is not of its kind", shared, l,
                              c.is_sliding(l) ? "sliding" : "full", src));
  }
  g.per_layer = h.int_or("embedding_length_per_layer_input", 0);

  if (h.int_or("expert_count", 0) > 0) {
    read_routed_experts(h, c, h.need_int("expert_feed_forward_length"), /*normalize=*/true);
    c.moe.expert_act = FfnActivation::Gelu;
    c.moe.dense_beside = true;
  }
  return c;
}

// The sliding layers' attention config: the model's with their head size and KV heads.
ModelConfig sliding_config(const ModelConfig& c) {
  ModelConfig s = c;
  s.head_dim = gemma4_config(c).head_dim_sliding;
  s.n_head_kv = gemma4_config(c).n_head_kv_sliding;
  return s;
}

class Gemma4Layers final : public LayerStack {
 public:
  Gemma4Layers(Backend& be, const ModelOptions& o, ModelConfig c)
      : LayerStack(be, o, std::move(c)),
        sliding_cfg_(sliding_config(cfg_)),
        heads_(split_gqa_heads(cfg_, shard_)),
        sliding_heads_(split_gqa_heads(sliding_cfg_, shard_)) {
    for (int l = first_; l < end_; l++)
      if (const int src = kv_source(l); src < first_)
        throw Error(fmt::format("pipeline parallelism over {} stages: layer {} reads layer {}'s KV cache, which "
                                "another stage holds (use fewer stages)",
                                shard_.stages, l, src));
  }

  KvLayout kv_layout() const override {
    const int end = std::min(end_, gemma4_config(cfg_).n_kv_layers);
    const int64_t full = int64_t{heads_.n_head_kv} * cfg_.head_dim;
    const int64_t sliding = int64_t{sliding_heads_.n_head_kv} * sliding_cfg_.head_dim;
    KvLayout l{std::max(0, end - first_), full, full, std::gcd(cfg_.head_dim, sliding_cfg_.head_dim)};
    l.sliding_window = cfg_.sliding_window;
    for (int i = first_; i < end; i++) l.sliding.push_back(cfg_.is_sliding(i));
    if (sliding != full) l.sliding_k_width = l.sliding_v_width = sliding;
    return l;
  }

 private:
  struct Layer {
    std::vector<float> attn_norm, post_attn_norm, ffn_norm, post_ffn_norm, out_scale;
    GqaWeights attn;
    FfnWeights ffn;  // dense (whole, beside the experts, on MoE layers)
    MoeWeights moe;
    std::vector<float> router_norm, pre_norm_2, post_norm_1, post_norm_2;  // MoE layers
    Weight ple_gate, ple_proj;                                             // per-layer embeddings
    std::vector<float> ple_norm;
  };

  int kv_source(int layer) const { return gemma4_config(cfg_).kv_source(layer, cfg_.is_sliding(layer)); }
  int64_t per_layer_width() const { return int64_t{cfg_.n_layer} * gemma4_config(cfg_).per_layer; }

  void load_extra(const WeightLoader& ld, const ModelOptions&) override {
    const ModelConfig& c = cfg_;
    bool full = false;
    for (int l = 0; l < c.n_layer; l++) full = full || !c.is_sliding(l);
    if (full) {
      // "Proportional" RoPE: pairs past the rotated quarter get a factor of 1e30 (no rotation).
      rope_factors_ = ld.require_vector("rope_freqs.weight", c.head_dim / 2);
      use_rope_factors(cfg_, rope_factors_);
      cfg_.rope_sliding.freq_factors = nullptr;  // the sliding layers' RoPE has none
    }
    if (gemma4_config(c).per_layer == 0) return;
    ple_embd_ = ld.require("token_embd.weight", {c.n_embd, c.n_vocab});  // (also on later pipeline stages)
    ple_tok_ = ld.require("per_layer_token_embd.weight", {per_layer_width(), c.n_vocab});
    ple_proj_ = be_.prepare_weight(ld.require("per_layer_model_proj.weight", {c.n_embd, per_layer_width()}));
    ple_norm_ = ld.require_vector("per_layer_proj_norm.weight", gemma4_config(c).per_layer);
  }

  void load_layer(const WeightLoader& ld, int l) override {
    const std::string p = layer_prefix(l);
    const int64_t dim = cfg_.n_embd;
    const bool sliding = cfg_.is_sliding(l);
    Layer& L = layers_.emplace_back();
    L.attn_norm = ld.require_vector(p + "attn_norm.weight", dim);
    L.attn = load_gqa(ld, be_, p, sliding ? sliding_cfg_ : cfg_, sliding ? sliding_heads_ : heads_, shard_,
                      {.qk_norm = true, .v_norm = true, .v_from_k = true, .no_kv = !gemma4_config(cfg_).keeps_kv(l)});
    L.post_attn_norm = ld.require_vector(p + "post_attention_norm.weight", dim);
    L.out_scale = ld.optional_vector(p + "layer_output_scale.weight", 1);
    L.ffn_norm = ld.require_vector(p + "ffn_norm.weight", dim);
    L.post_ffn_norm = ld.require_vector(p + "post_ffw_norm.weight", dim);
    const int64_t width = gemma4_config(cfg_).n_ff[static_cast<size_t>(l)];
    if (moe_layer(l)) {
      L.ffn = load_ffn(ld, be_, p, "", dim, width);  // whole: it runs after the experts' sum
      L.moe = load_moe(ld, be_, p, dim, cfg_.moe, shard_);
      // The router's input: rmsnorm(x) / sqrt(n_embd) * ffn_gate_inp.scale, as one norm weight.
      L.router_norm = ld.require_vector(p + "ffn_gate_inp.scale", dim);
      const float inv = 1.0f / std::sqrt(static_cast<float>(dim));
      for (float& w : L.router_norm) w *= inv;
      L.pre_norm_2 = ld.require_vector(p + "pre_ffw_norm_2.weight", dim);
      L.post_norm_1 = ld.require_vector(p + "post_ffw_norm_1.weight", dim);
      L.post_norm_2 = ld.require_vector(p + "post_ffw_norm_2.weight", dim);
    } else {
      L.ffn = load_ffn(ld, be_, p, "", dim, width, false, shard_);
    }
    if (gemma4_config(cfg_).per_layer > 0) {
      L.ple_gate = be_.prepare_weight(ld.require(p + "inp_gate.weight", {dim, gemma4_config(cfg_).per_layer}));
      L.ple_proj = be_.prepare_weight(ld.require(p + "proj.weight", {gemma4_config(cfg_).per_layer, dim}));
      L.ple_norm = ld.require_vector(p + "post_norm.weight", dim);
    }
  }

  void allocate(int64_t n) override {
    const int64_t dim = cfg_.n_embd;
    gqa_ = std::make_unique<GqaAttention>(be_, cfg_, heads_, n);
    gqa_sliding_ = std::make_unique<GqaAttention>(be_, sliding_cfg_, sliding_heads_, n);
    if (cfg_.moe.routing.n_expert > 0) {
      router_in_ = ActBuffer(be_, n * dim);
      dense_in_ = ActBuffer(be_, n * dim);
      dense_out_ = ActBuffer(be_, n * dim);
      dense_hb_ = ActBuffer(be_, n * cfg_.n_ff);
      dense_hb2_ = ActBuffer(be_, n * cfg_.n_ff);
    }
    if (gemma4_config(cfg_).per_layer > 0) {
      ple_ = ActBuffer(be_, n * per_layer_width());
      ple_tok_rows_ = ActBuffer(be_, n * per_layer_width());
      ple_x_ = ActBuffer(be_, n * dim);
      ple_gate_ = ActBuffer(be_, n * gemma4_config(cfg_).per_layer);
      ple_in_ = ActBuffer(be_, n * gemma4_config(cfg_).per_layer);
    }
  }

  // The per-layer inputs P of every row of the step, [row][layer][n_pl].
  void begin_step(const Batch& b, const BatchPlacement&) override {
    if (gemma4_config(cfg_).per_layer == 0) return;
    const int64_t n = b.size(), dim = cfg_.n_embd, w = n * per_layer_width(), n_pl = gemma4_config(cfg_).per_layer;
    be_.annotate_layer(-1);
    be_.embed(ple_embd_, b.tokens.data(), n, ple_x_);
    be_.scale(ple_x_, n * dim, cfg_.embed_scale);
    // Media rows: the projection of their own rows (unscaled), and (their placeholders being token 0 in the batch)
    // the padding token's per-layer embedding, as llama.cpp's build_inp_per_layer takes for embeddings input.
    copy_media_rows(b, ple_x_, 0, n);
    be_.matmul(ple_proj_, ple_x_, n, ple_);
    be_.scale(ple_, w, 1.0f / std::sqrt(static_cast<float>(dim)));
    be_.rmsnorm(ple_, ple_norm_.data(), ple_, n * cfg_.n_layer, n_pl, cfg_.rms_eps);
    be_.embed(ple_tok_, b.tokens.data(), n, ple_tok_rows_);
    be_.scale(ple_tok_rows_, w, std::sqrt(static_cast<float>(n_pl)));
    be_.add(ple_, ple_tok_rows_, w);
    be_.scale(ple_, w, 1.0f / std::sqrt(2.0f));
  }

  const Layer& at(int layer) const { return layers_[static_cast<size_t>(layer - first_)]; }

  void attention(const LayerRows& r, Act y) override {
    const Layer& L = at(r.layer);
    GqaAttention& a = cfg_.is_sliding(r.layer) ? *gqa_sliding_ : *gqa_;
    const Act xb = norm_rows(r, L.attn_norm);
    if (!L.attn.reads_only()) return a.run(be_, L.attn, r, xb, y);
    a.run(be_, L.attn, LayerRows{r.batch, r.place, r.kv, r.layer, kv_source(r.layer) - first_, r.r0, r.n}, xb, y);
  }

  // Dense layers: this rank's share of the GeGLU. MoE layers: the experts alone (the dense FFN follows the
  // sum, in residual).
  void ffn(const LayerRows& r, Act y) override {
    const Layer& L = at(r.layer);
    if (!L.moe.present()) return feed_forward(L.ffn, {}, FfnActivation::Gelu, norm_rows(r, L.ffn_norm), r.n, y);
    be_.rmsnorm(x(r), L.router_norm.data(), router_in_, r.n, cfg_.n_embd, cfg_.rms_eps);
    feed_forward(L.ffn, L.moe, FfnActivation::Gelu, norm_rows(r, L.pre_norm_2), r.n, y, nullptr, router_in_);
  }

  void residual(int layer, Branch branch, Act x, Act y, int64_t r0, int64_t n) override {
    const Layer& L = at(layer);
    const int64_t dim = cfg_.n_embd;
    const float eps = cfg_.rms_eps;
    if (branch == Branch::Attention) {
      be_.rmsnorm(y, L.post_attn_norm.data(), y, n, dim, eps);
      return LayerStack::residual(layer, branch, x, y, r0, n);
    }
    if (L.moe.present()) {
      be_.rmsnorm(y, L.post_norm_2.data(), y, n, dim, eps);
      be_.rmsnorm(x, L.ffn_norm.data(), dense_in_, n, dim, eps);
      run_ffn(be_, L.ffn, FfnActivation::Gelu, dense_in_, n, dense_hb_, dense_hb2_, dense_out_);
      be_.rmsnorm(dense_out_, L.post_norm_1.data(), dense_out_, n, dim, eps);
      be_.add(y, dense_out_, n * dim);
    }
    be_.rmsnorm(y, L.post_ffn_norm.data(), y, n, dim, eps);
    LayerStack::residual(layer, branch, x, y, r0, n);
    if (gemma4_config(cfg_).per_layer > 0) {
      const int64_t n_pl = gemma4_config(cfg_).per_layer;
      be_.matmul(L.ple_gate, x, n, ple_gate_);
      be_.copy(ple_in_, n_pl, ple_ + r0 * per_layer_width() + layer * n_pl, per_layer_width(), n, n_pl);
      be_.gelu_mul(ple_gate_, ple_in_, n * n_pl);
      be_.matmul(L.ple_proj, ple_gate_, n, y);
      be_.rmsnorm(y, L.ple_norm.data(), y, n, dim, eps);
      be_.add(x, y, n * dim);
    }
    if (!L.out_scale.empty()) be_.scale(x, n * dim, L.out_scale[0]);
  }

  void log_fusion() const override {
    int qkv = 0, ffn = 0;
    for (const auto& L : layers_) {
      qkv += !L.attn.reads_only() && GqaAttention::fused(be_, L.attn);
      ffn += be_.fuses(L.ffn.gate, L.ffn.up);
    }
    print_gqa_fusion(qkv, ffn, cfg_.n_layer, true, "GeGLU");
  }

  const ModelConfig sliding_cfg_;
  const GqaHeads heads_, sliding_heads_;
  std::vector<float> rope_factors_;  // what cfg_.rope.freq_factors points at
  std::vector<Layer> layers_;        // this rank's, from first_
  std::unique_ptr<GqaAttention> gqa_, gqa_sliding_;
  Weight ple_embd_, ple_tok_, ple_proj_;
  std::vector<float> ple_norm_;
  ActBuffer router_in_, dense_in_, dense_out_, dense_hb_, dense_hb2_;
  ActBuffer ple_, ple_tok_rows_, ple_x_, ple_gate_, ple_in_;
};

std::unique_ptr<Model> make(const GgufFile& f, Backend& be, const ModelOptions& o, ModelConfig c) {
  auto m = std::make_unique<Gemma4Layers>(be, o, std::move(c));
  m->init(f, o);
  return m;
}

// ---- synth: llama.cpp's converter's keys and tensors (conversion/gemma.py's Gemma4Model) ----

bool synth_sliding(const SynthShape& s, int64_t l) { return l % synth_gemma4(s).period != synth_gemma4(s).period - 1; }

// A norm's weights near `scale`, varied per element and tensor, so that a norm applied with the wrong weights
// shows.
void varied_norm(SynthFile& out, const std::string& name, int64_t n, int salt, float scale = 1.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i++) v[i] = scale * (1.0f + 0.25f * std::sin(0.7f * static_cast<float>(i) + 1.3f * salt));
  out.values(name, v);
}

// A shape's derived sizes: head sizes and full layers' KV heads, the layers with a cache, each layer's FFN width.
struct SynthDims {
  int64_t hs = 0, hf = 0, kvf = 0, n_kv = 0;
  std::vector<int64_t> width;
};

SynthDims synth_dims(const SynthShape& s) {
  const SynthGemma4& g = synth_gemma4(s);
  SynthDims d;
  d.hs = synth_head_dim(s);
  d.hf = g.head_dim_full > 0 ? g.head_dim_full : d.hs;
  d.kvf = g.kv_heads_full > 0 ? g.kv_heads_full : s.kv_heads;
  d.n_kv = s.layers - g.shared_kv;
  if (g.period < 1 || d.n_kv < 2 || s.heads % s.kv_heads || s.heads % d.kvf)
    throw Error("gemma4: period >= 1, at least 2 layers with a cache and KV heads that divide the heads");
  if (g.shared_kv > 0 && (!synth_sliding(s, d.n_kv - 2) || synth_sliding(s, d.n_kv - 1)))
    throw Error(fmt::format("gemma4: {} shared layers of {}: the last two layers with a cache ({} and {}) must be a "
                            "sliding one, then a full one (every {}th layer is full)",
                            g.shared_kv, s.layers, d.n_kv - 2, d.n_kv - 1, g.period));
  for (int64_t l = 0; l < s.layers; l++) d.width.push_back(g.double_wide && l >= d.n_kv ? 2 * s.ffn : s.ffn);
  return d;
}

void synth_keys(SynthFile& out, const SynthDims& dims) {
  const SynthShape& s = out.shape();
  const SynthDecoder& d = s.dec;
  const SynthGemma4& g = synth_gemma4(s);
  const std::string a = s.arch + ".";
  std::vector<GgufValue> ffn, kv, pattern;
  for (int64_t l = 0; l < s.layers; l++) {
    ffn.push_back(GgufValue::u32(static_cast<uint32_t>(dims.width[l])));
    kv.push_back(GgufValue::u32(static_cast<uint32_t>(synth_sliding(s, l) ? s.kv_heads : dims.kvf)));
    pattern.push_back(GgufValue::boolean(synth_sliding(s, l)));
  }
  // The sizes every family writes, then the two Gemma 4 gives per layer in their place.
  synth_sizes(out, s.layers, s.kv_heads, dims.hf, d.rope_base, 1e-6f);
  if (g.double_wide) out.writer().set(a + "feed_forward_length", GgufValue::array(GgufValueType::UINT32, ffn));
  out.writer().set(a + "attention.head_count_kv", GgufValue::array(GgufValueType::UINT32, kv));
  out.f32("rope.freq_base_swa", 10000.0f);
  out.u32("attention.key_length", dims.hf);
  out.u32("attention.value_length", dims.hf);
  out.u32("attention.key_length_swa", dims.hs);
  out.u32("attention.value_length_swa", dims.hs);
  out.u32("rope.dimension_count_swa", dims.hs);
  out.u32("attention.sliding_window", d.window);
  out.writer().set(a + "attention.sliding_window_pattern", GgufValue::array(GgufValueType::BOOL, pattern));
  out.u32("attention.shared_kv_layers", g.shared_kv);
  out.u32("embedding_length_per_layer_input", g.per_layer);
  out.f32("final_logit_softcapping", 30.0f);
  if (d.experts > 0) {
    out.u32("expert_count", d.experts);
    out.u32("expert_used_count", d.experts_used);
    out.u32("expert_feed_forward_length", d.ffn_expert);
  }
}

// Layer l's tensors; salt numbers the varied norms.
void synth_layer(SynthFile& out, const SynthDims& dims, int64_t l, int& salt) {
  const SynthShape& s = out.shape();
  const SynthDecoder& d = s.dec;
  const SynthGemma4& g = synth_gemma4(s);
  const float in_std = SynthFile::fan_in(s.dim);
  const std::string p = fmt::format("blk.{}.", l);
  const bool sliding = synth_sliding(s, l);
  const int64_t head = sliding ? dims.hs : dims.hf, q_dim = s.heads * head;
  const int64_t kv_dim = (sliding ? s.kv_heads : dims.kvf) * head, width = dims.width[l];
  // Scores are not scaled (1.0): the q and k norms' weights carry head^-1/4 each, as trained ones come to, so
  // that q.k stays near unit size (with unit weights the scores are of head size, attention near an argmax,
  // and float32 rounding — GELU's fp16 table above all — moves the tiny model's logits by 1e-2).
  const float qk = std::pow(static_cast<float>(head), -0.25f);
  varied_norm(out, p + "attn_norm.weight", s.dim, salt++);
  out.random(p + "attn_q.weight", {s.dim, q_dim}, in_std);
  if (l < dims.n_kv) {
    out.random(p + "attn_k.weight", {s.dim, kv_dim}, in_std);
    if (!(g.k_eq_v && !sliding)) out.random(p + "attn_v.weight", {s.dim, kv_dim}, in_std);
    varied_norm(out, p + "attn_k_norm.weight", head, salt++, qk);
  }
  varied_norm(out, p + "attn_q_norm.weight", head, salt++, qk);
  out.random(p + "attn_output.weight", {q_dim, s.dim}, out.residual_std(q_dim));
  varied_norm(out, p + "post_attention_norm.weight", s.dim, salt++);
  out.values(p + "layer_output_scale.weight", {0.8f + 0.1f * static_cast<float>(l % 5)});
  varied_norm(out, p + "ffn_norm.weight", s.dim, salt++);
  out.random(p + "ffn_gate.weight", {s.dim, width}, in_std);
  out.random(p + "ffn_up.weight", {s.dim, width}, in_std);
  out.random(p + "ffn_down.weight", {width, s.dim}, out.residual_std(width));
  varied_norm(out, p + "post_ffw_norm.weight", s.dim, salt++);
  if (d.experts > 0) {
    out.random(p + "ffn_gate_inp.weight", {s.dim, d.experts}, in_std);
    varied_norm(out, p + "ffn_gate_inp.scale", s.dim, salt++);
    varied_norm(out, p + "pre_ffw_norm_2.weight", s.dim, salt++);
    varied_norm(out, p + "post_ffw_norm_1.weight", s.dim, salt++);
    varied_norm(out, p + "post_ffw_norm_2.weight", s.dim, salt++);
    out.random(p + "ffn_gate_up_exps.weight", {s.dim, 2 * d.ffn_expert, d.experts}, in_std);
    out.random(p + "ffn_down_exps.weight", {d.ffn_expert, s.dim, d.experts}, out.residual_std(d.ffn_expert));
    varied_norm(out, p + "ffn_down_exps.scale", d.experts, salt++);
  }
  if (g.per_layer > 0) {
    out.random(p + "inp_gate.weight", {s.dim, g.per_layer}, in_std);
    out.random(p + "proj.weight", {g.per_layer, s.dim}, out.residual_std(g.per_layer));
    varied_norm(out, p + "post_norm.weight", s.dim, salt++);
  }
}

void synth(SynthFile& out) {
  const SynthShape& s = out.shape();
  const SynthGemma4& g = synth_gemma4(s);
  const SynthDims dims = synth_dims(s);
  synth_keys(out, dims);
  // The full layers' "proportional" RoPE: a quarter of the pairs rotate, the rest get 1e30.
  const auto rotated = static_cast<int64_t>(static_cast<float>(dims.hf) * g.rope_partial_full / 2.0f);
  std::vector<float> factors(static_cast<size_t>(dims.hf / 2), 1e30f);
  std::fill(factors.begin(), factors.begin() + rotated, 1.0f);
  out.values("rope_freqs.weight", factors);
  if (g.per_layer > 0) {
    out.random("per_layer_token_embd.weight", {g.per_layer * s.layers, s.vocab}, 1.0f);
    out.random("per_layer_model_proj.weight", {s.dim, g.per_layer * s.layers}, SynthFile::fan_in(s.dim));
    varied_norm(out, "per_layer_proj_norm.weight", g.per_layer, 0);
  }
  int salt = 1;
  for (int64_t l = 0; l < s.layers; l++) synth_layer(out, dims, l, salt);
}

std::vector<SynthPreset> presets() {
  auto shape = [](int64_t dim, int64_t layers, int64_t heads, int64_t kv, int64_t ffn, int64_t vocab, int64_t ctx,
                  SynthDecoder dec, SynthGemma4 g4) {
    SynthShape s = synth_shape("gemma4", dim, layers, heads, kv, ffn, vocab, ctx, dec);
    s.family = g4;
    return s;
  };
  return {
      // tiny: sliding layers (window 8, 16-dim heads, 2 KV heads) and full ones (32-dim heads, 1 KV head,
      // a quarter rotated) every third; the last three layers read layer 7's (sliding) and 8's (full)
      // caches (12 layers: a pipeline of two stages keeps them together); per-layer embeddings; double-wide
      // FFNs on the sharing layers. The tiny presets' embedding has a standard deviation of 1/sqrt(dim): times
      // sqrt(dim) it is of the branches' size (of 1 it drowns them, and the model repeats its last token).
      {"tiny", shape(64, 12, 4, 2, 96, 512, 4096,
                     SynthDecoder{.head_dim = 16, .tied = true, .rope_base = 1e6f, .window = 8, .embed_std = 0.125f},
                     SynthGemma4{.head_dim_full = 32, .kv_heads_full = 1, .period = 3, .shared_kv = 3, .per_layer = 8,
                                 .double_wide = true})},
      // tiny-moe: the 26B-A4B form — experts (8, top 2) beside every dense FFN, v from k on full layers.
      {"tiny-moe",
       shape(64, 6, 4, 2, 64, 512, 4096,
             SynthDecoder{.head_dim = 16, .tied = true, .rope_base = 1e6f, .window = 8, .experts = 8, .experts_used = 2,
                          .ffn_expert = 32, .embed_std = 0.125f},
             SynthGemma4{.head_dim_full = 32, .kv_heads_full = 1, .period = 3, .k_eq_v = true})},
      {"e2b", shape(1536, 35, 8, 1, 6144, 262144, 131072,
                    SynthDecoder{.head_dim = 256, .tied = true, .rope_base = 1e6f, .window = 512},
                    SynthGemma4{.head_dim_full = 512, .kv_heads_full = 1, .period = 5, .shared_kv = 20,
                                .per_layer = 256, .double_wide = true})},
      {"e4b", shape(2560, 42, 8, 2, 10240, 262144, 131072,
                    SynthDecoder{.head_dim = 256, .tied = true, .rope_base = 1e6f, .window = 512},
                    SynthGemma4{.head_dim_full = 512, .kv_heads_full = 2, .period = 6, .shared_kv = 18,
                                .per_layer = 256})},
      {"26b-a4b", shape(2816, 30, 16, 8, 2112, 262144, 262144,
                        SynthDecoder{.head_dim = 256, .tied = true, .rope_base = 1e6f, .window = 1024, .experts = 128,
                                     .experts_used = 8, .ffn_expert = 704},
                        SynthGemma4{.head_dim_full = 512, .kv_heads_full = 2, .period = 6, .k_eq_v = true})},
      {"31b", shape(5376, 60, 32, 16, 21504, 262144, 262144,
                    SynthDecoder{.head_dim = 256, .tied = true, .rope_base = 1e6f, .window = 1024},
                    SynthGemma4{.head_dim_full = 512, .kv_heads_full = 4, .period = 6, .k_eq_v = true})},
  };
}

// synth --shared-kv N: the last N layers read earlier layers' caches.
bool synth_option(SynthShape& s, const std::string& option, int64_t value) {
  if (option != "shared_kv") return false;
  family_part<SynthGemma4>(s.family).shared_kv = value;
  return true;
}

}  // namespace

const Family& gemma4_family() {
  static const Family f = [] {
    Family f{"gemma4", "Gemma 4 E2B, E4B, 26B-A4B, 31B (text)", kRecipe, read, make, synth, presets};
    f.synth_option = synth_option;
    return f;
  }();
  return f;
}

}  // namespace kestrel

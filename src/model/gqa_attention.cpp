#include "model/gqa_attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "ops/sigmoid_gate.h"

namespace kestrel {

GqaHeads split_gqa_heads(const ModelConfig& c, const TensorShard& shard) {
  GqaHeads h;
  h.n_head = static_cast<int>(shard.share(c.n_head, "attention heads"));
  // Fewer KV heads than ranks (GQA, MQA): each KV head is held by the ranks
  // whose query heads read it, as vLLM does; else they split like the rest.
  if (c.n_head_kv < shard.n && shard.n % c.n_head_kv == 0) {
    h.n_head_kv = 1;
    h.kv_head = shard.rank / (shard.n / c.n_head_kv);
  } else {
    h.n_head_kv = static_cast<int>(shard.share(c.n_head_kv, "KV heads"));
  }
  return h;
}

KvLayout gqa_kv_layout(const ModelConfig& c, const GqaHeads& heads, int first, int end) {
  const int64_t kv_dim = static_cast<int64_t>(heads.n_head_kv) * c.head_dim;
  KvLayout l{end - first, kv_dim, kv_dim, c.head_dim};
  l.sliding_window = c.sliding_window;
  for (int i = first; i < end && !c.sliding_layers.empty(); i++) l.sliding.push_back(c.is_sliding(i));
  return l;
}

namespace {

// This rank's rows of a k or v matrix (and of its bias): its share of the
// KV heads, or the one it holds a copy of.
Weight kv_rows(const Weight& w, const ModelConfig& c, const GqaHeads& heads, const TensorShard& shard) {
  if (heads.kv_head < 0) return shard.rows(w);
  const int64_t hd = c.head_dim;
  return weight_rows(w, heads.kv_head * hd, hd, fmt::format("{}[KV head {}]", w.name, heads.kv_head));
}

std::vector<float> kv_part(const std::vector<float>& v, const ModelConfig& c, const GqaHeads& heads,
                           const TensorShard& shard) {
  if (v.empty() || heads.kv_head < 0) return shard.part(v, 0, static_cast<int64_t>(v.size()));
  const int64_t hd = c.head_dim;
  return {v.begin() + heads.kv_head * hd, v.begin() + (heads.kv_head + 1) * hd};
}

}  // namespace

GqaWeights load_gqa(const WeightLoader& ld, Backend& be, const std::string& p, const ModelConfig& c,
                    const GqaHeads& heads, const TensorShard& sh, const GqaOptions& o) {
  const int64_t dim = c.n_embd, hd = c.head_dim, q_dim = c.n_head * hd, kv_dim = c.n_head_kv * hd;
  GqaWeights w;
  // Column-parallel by heads: this rank's run of q rows and of k and v rows.
  if (o.fused_qkv) {
    const Weight qkv = ld.require(p + "attn_qkv.weight", {dim, q_dim + 2 * kv_dim});
    w.wq = be.prepare_weight(sh.rows(weight_rows(qkv, 0, q_dim, qkv.name + ".q")));
    w.wk = be.prepare_weight(kv_rows(weight_rows(qkv, q_dim, kv_dim, qkv.name + ".k"), c, heads, sh));
    w.wv = be.prepare_weight(kv_rows(weight_rows(qkv, q_dim + kv_dim, kv_dim, qkv.name + ".v"), c, heads, sh));
  } else if (o.no_kv) {
    w.wq = be.prepare_weight(sh.rows(ld.require(p + "attn_q.weight", {dim, q_dim})));
    for (const char* t : {"attn_k.weight", "attn_v.weight", "attn_k_norm.weight"})
      if (ld.has(p + t)) ld.skip(p + t, "a layer that reads an earlier layer's KV cache computes no keys or values");
  } else {
    if (o.q_gate && sh.split()) throw Error("gated attention (attn_q with a gate per head) cannot run split across ranks yet");
    w.wq = be.prepare_weight(sh.rows(ld.require(p + "attn_q.weight", {dim, o.q_gate ? 2 * q_dim : q_dim})));
    w.q_gate = o.q_gate;
    w.wk = be.prepare_weight(kv_rows(ld.require(p + "attn_k.weight", {dim, kv_dim}), c, heads, sh));
    if (o.v_from_k && !ld.has(p + "attn_v.weight"))
      w.wv = w.wk;
    else
      w.wv = be.prepare_weight(kv_rows(ld.require(p + "attn_v.weight", {dim, kv_dim}), c, heads, sh));
    w.bq = sh.part(ld.optional_vector(p + "attn_q.bias", q_dim), 0, q_dim);
    w.bk = kv_part(ld.optional_vector(p + "attn_k.bias", kv_dim), c, heads, sh);
    w.bv = kv_part(ld.optional_vector(p + "attn_v.bias", kv_dim), c, heads, sh);
  }
  if (o.qk_norm) {
    w.q_norm = ld.require_vector(p + "attn_q_norm.weight", hd);
    if (!o.no_kv) w.k_norm = ld.require_vector(p + "attn_k_norm.weight", hd);
  }
  w.v_norm = o.v_norm;
  if (o.sinks) w.sinks = sh.part(ld.require_vector(p + "attn_sinks.weight", c.n_head), 0, c.n_head);
  // Row-parallel: the columns that read this rank's heads; the bias once, in rank 0's partial sum.
  w.wo = be.prepare_weight(sh.columns(ld.require(p + "attn_output.weight", {q_dim, dim})));
  w.bo = ld.optional_vector(p + "attn_output.bias", dim);
  if (sh.rank != 0) w.bo.clear();
  return w;
}

std::vector<float> load_rope_freqs(const WeightLoader& ld, const ModelConfig& c) {
  // The rotated layers' count (Llama 4's full layers rotate nothing: its sliding ones say).
  return ld.optional_vector("rope_freqs.weight", std::max(c.rope.n_rot, c.rope_sliding.n_rot) / 2);
}

std::vector<float> load_longrope_factors(const WeightLoader& ld, const ModelConfig& c, int64_t n_ctx) {
  if (!ld.has("rope_factors_short.weight") && !ld.has("rope_factors_long.weight")) return {};
  const bool use_long = (n_ctx > 0 ? n_ctx : c.n_ctx_train) > c.n_ctx_orig;
  const char* use = use_long ? "rope_factors_long.weight" : "rope_factors_short.weight";
  std::vector<float> f = ld.require_vector(use, c.rope.n_rot / 2);
  ld.skip(use_long ? "rope_factors_short.weight" : "rope_factors_long.weight",
          "LongRoPE: the other context range's factors");
  return f;
}

void use_rope_factors(ModelConfig& c, const std::vector<float>& factors) {
  if (factors.empty()) return;
  for (float ff : factors)
    if (!(ff > 0.0f) || !std::isfinite(ff))
      throw Error(fmt::format("RoPE frequency factor {} must be positive and finite", ff));
  c.rope.freq_factors = factors.data();
  c.rope_sliding.freq_factors = factors.data();
}

void print_gqa_fusion(int fused_qkv, int fused_ffn, int n_layer, bool qk_norm, const std::string& ffn) {
  fmt::print(stderr,
             "fusion: attn_q+attn_k+attn_v(+bias{})+RoPE: one activation preparation, one parallel pass in whole "
             "heads, the rest in the epilogue: {} of {} layers\n",
             qk_norm ? "+q/k norm" : "", fused_qkv, n_layer);
  fmt::print(stderr, "fusion: ffn_gate+ffn_up+{}: one pass, the activation applied in the epilogue: {} of {} layers\n",
             ffn, fused_ffn, n_layer);
  fmt::print(stderr, "fusion: not fused: the residual adds, RMSNorm (its output is quantized once per fused pass)\n");
}

GqaAttention::GqaAttention(Backend& be, const ModelConfig& c, const GqaHeads& heads, int64_t n)
    : c_(c), heads_(heads) {
  const int64_t q_dim = static_cast<int64_t>(heads.n_head) * c.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(heads.n_head_kv) * c.head_dim;
  q_ = ActBuffer(be, n * q_dim);
  k_ = ActBuffer(be, n * kv_dim);
  v_ = ActBuffer(be, n * kv_dim);
  att_ = ActBuffer(be, n * q_dim);
  ones_.assign(static_cast<size_t>(c.head_dim), 1.0f);
  max_rows_ = n;
  const int* sec = c.rope_sections;
  const int total = sec[0] + sec[1] + sec[2] + sec[3];
  if (total > 0) {  // which of t, h, w turns pair i (llama.cpp's interleaved IMROPE; read_qwen_hybrid refuses a fourth)
    const int pairs = c.rope.n_rot / 2;
    for (auto& f : mrope_ff_) f.assign(static_cast<size_t>(pairs), std::numeric_limits<float>::infinity());
    for (int i = 0; i < pairs; i++) {
      const int s = i % total;
      const int pass = s % 3 == 1 && s < 3 * sec[1] ? 1 : s % 3 == 2 && s < 3 * sec[2] ? 2 : 0;
      mrope_ff_[pass][static_cast<size_t>(i)] = c.rope.freq_factors ? c.rope.freq_factors[i] : 1.0f;
    }
  }
}

// Pass `pass` of M-RoPE: the pairs of that section turn, the others by an angle of exactly 0 (a divisor of
// infinity: cos 1, sin 0, an identity), so three passes of any backend's RoPE turn each pair once, by its own
// position. (A scale of cos and sin — YaRN, attn_factor — would apply three times: refused.)
RopeParams GqaAttention::mrope_pass(const RopeParams& rope, int pass) const {
  if (mrope_ff_[0].empty()) throw Error(fmt::format("{}: rows with M-RoPE positions, but the model has no rope sections", c_.arch));
  if (rope_mscale(rope) != 1.0f) throw Error("M-RoPE positions with a scaled rotation (YaRN, attn_factor): not supported");
  RopeParams p = rope;
  p.freq_factors = mrope_ff_[pass].data();
  return p;
}

void GqaAttention::rope(Backend& be, Act x, const LayerRows& r, int heads, const RopeParams& rope, int from_pass) {
  if (!r.rope_positions(0)) return be.rope(x, r.positions(), r.n, heads, c_.head_dim, rope);
  for (int pass = from_pass; pass < 3; pass++)
    be.rope(x, r.rope_positions(pass), r.n, heads, c_.head_dim, mrope_pass(rope, pass));
}

// q and gate from one projection (each head's query rows, then its gate rows), then k and v; the head norms
// and RoPE as the fused path applies them.
void GqaAttention::project_gated(Backend& be, const GqaWeights& w, const LayerRows& r, Act xb) {
  const ModelConfig& c = c_;
  const int64_t n = r.n, hd = c.head_dim, heads = heads_.n_head;
  qg_.ensure(be, max_rows_ * 2 * heads * hd);
  gate_.ensure(be, max_rows_ * heads * hd);
  be.matmul(w.wq, xb, n, qg_);
  be.copy(q_, hd, qg_, 2 * hd, n * heads, hd);
  be.copy(gate_, hd, qg_ + hd, 2 * hd, n * heads, hd);
  be.matmul(w.wk, xb, n, k_);
  be.matmul(w.wv, xb, n, v_);
  if (!w.q_norm.empty()) be.rmsnorm(q_, w.q_norm.data(), q_, n * heads, hd, c.rms_eps);
  if (!w.k_norm.empty()) be.rmsnorm(k_, w.k_norm.data(), k_, n * heads_.n_head_kv, hd, c.rms_eps);
  const RopeParams& rope_params = c.rope_of(r.layer);
  rope(be, q_, r, static_cast<int>(heads), rope_params);
  rope(be, k_, r, heads_.n_head_kv, rope_params);
}

void GqaAttention::run(Backend& be, const GqaWeights& w, const LayerRows& r, Act xb, Act out) {
  const ModelConfig& c = c_;
  const int64_t n = r.n;
  const Weight* qkv[3] = {&w.wq, &w.wk, &w.wv};
  const float* bias[3] = {w.bq.empty() ? nullptr : w.bq.data(), w.bk.empty() ? nullptr : w.bk.data(),
                          w.bv.empty() ? nullptr : w.bv.data()};
  const Act qkv_out[3] = {q_, k_, v_};
  const RopeParams& rope = c.rope_of(r.layer);
  if (w.q_gate) {
    project_gated(be, w, r, xb);
  } else if (w.reads_only()) {  // queries only: the keys and values are the cache layer's
    be.matmul(w.wq, xb, n, q_);
    if (!w.q_norm.empty()) be.rmsnorm(q_, w.q_norm.data(), q_, n * heads_.n_head, c.head_dim, c.rms_eps);
    this->rope(be, q_, r, heads_.n_head, rope);
  } else {
    Backend::QkvShape shape{heads_.n_head, heads_.n_head_kv, c.head_dim};
    if (!w.q_norm.empty()) shape.q_norm = w.q_norm.data(), shape.k_norm = w.k_norm.data(), shape.norm_eps = c.rms_eps;
    if (r.rope_positions(0)) {  // M-RoPE: the temporal pass fused, then the height and width passes
      be.qkv_rope(qkv, bias, xb, n, r.rope_positions(0), mrope_pass(rope, 0), shape, qkv_out);
      this->rope(be, q_, r, heads_.n_head, rope, 1);
      this->rope(be, k_, r, heads_.n_head_kv, rope, 1);
    } else {
      be.qkv_rope(qkv, bias, xb, n, r.positions(), rope, shape, qkv_out);
    }
    if (w.v_norm) be.rmsnorm(v_, ones_.data(), v_, n * heads_.n_head_kv, c.head_dim, c.rms_eps);
  }
  const int64_t q_dim = static_cast<int64_t>(heads_.n_head) * c.head_dim;
  if (c.query_temp.on_layer(rope))  // by position (Mistral 3; Llama 4's layers without RoPE)
    for (int64_t i = 0; i < n; i++) be.scale(q_ + i * q_dim, q_dim, c.query_temp.at(r.positions()[i]));
  if (c.rope_qk_norm && rope.n_rot > 0) {  // Llama 4 Scout: weightless, after RoPE, on the RoPE layers
    be.rmsnorm(q_, ones_.data(), q_, n * heads_.n_head, c.head_dim, c.rms_eps);
    be.rmsnorm(k_, ones_.data(), k_, n * heads_.n_head_kv, c.head_dim, c.rms_eps);
  }
  if (!w.reads_only()) be.write_kv(r.kv.layer_write(r.kv_layer), r.slots(), n, k_, v_);
  AttentionShape as{heads_.n_head, heads_.n_head_kv, c.head_dim};
  as.scale = c.attn_scale > 0.0f ? c.attn_scale : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  as.window = c.window(r.layer);
  as.chunk = c.chunk(r.layer);
  as.softcap = c.attn_softcap;
  if (!w.sinks.empty()) as.sinks = w.sinks.data();
  const int32_t* horizons = c.both_ways_sliding_only && !c.is_sliding(r.layer) ? nullptr : r.horizons();
  be.attention(r.kv.layer_view(r.kv_layer), {n, q_, att_, r.positions(), r.tables(), horizons}, as);
  if (w.q_gate) ops::sigmoid_gate(be, {att_, gate_, n * q_dim, 1});
  be.matmul(w.wo, att_, n, out);
  if (!w.bo.empty()) be.add_bias(out, w.bo.data(), n, c.n_embd);
}

}  // namespace kestrel

// GLM-4.5 / 4.6 / 4.7 MoE (`glm4moe`: GLM-4.5, GLM-4.5-Air, GLM-4.6, GLM-4.7, GLM-4.7-Flash), as llama.cpp's
// llama_model_glm4_moe:
//
//   x += GQA attention(rmsnorm(x))   q/k/v biases, RMSNorm of each q and k head where the file has them
//                                     (GLM-4.5 355B), NeoX RoPE on the first rope.dimension_count dims (half)
//   x += FFN(rmsnorm(x))             the norm is the file's post_attention_norm; the leading dense layers a
//                                     SwiGLU FFN, the others DeepSeek-V3's routing (sigmoid scores, a selection
//                                     bias, the chosen renormalised and scaled) + the shared expert(s)
//
// and the multi-token-prediction block after the trunk (nextn_predict_layers, `--spec mtp`): DeepSeek's
// nextn block (eh_proj over [enorm(embedding) | hnorm(hidden)]) around one such layer, the head norm and head
// its own where the file has them.
#include <fmt/format.h>

#include "model/arch/families.h"
#include "model/gqa_attention.h"
#include "model/hparams_common.h"
#include "model/layer_stack.h"

namespace kestrel {
namespace {

constexpr LayerRecipe kRecipe{.qkv_bias = true, .ffn_norm = LayerRecipe::FfnNorm::PostAttention};

ModelConfig read(HparamReader& h, const ModelOptions&) {
  ModelConfig c = read_common(h, {.mtp_blocks = true});
  read_gqa_heads(h, c);
  read_rope(h, c, RopeStyle::NeoX);
  MoeConfig& e = c.moe;
  read_deepseek_experts(h, c);
  e.n_dense_lead = static_cast<int>(h.int_or("leading_dense_block_count", 0));
  if (e.n_dense_lead < 0 || e.n_dense_lead > c.n_layer)
    throw h.bad("leading_dense_block_count", fmt::format("= {} exceeds block_count {}", e.n_dense_lead, c.n_layer));
  const int64_t gating = h.int_or("expert_gating_func", 2);  // llama.cpp: sigmoid unless the file says
  if (gating != 1 && gating != 2)
    throw h.bad("expert_gating_func", fmt::format("= {}: not 1 (softmax) or 2 (sigmoid)", gating));
  e.routing.gating = static_cast<ExpertGating>(gating);
  if (c.n_mtp > 1) throw h.bad("nextn_predict_layers", fmt::format("= {}: glm4moe files carry at most one", c.n_mtp));
  return c;
}

class Glm4Moe final : public LayerStack {
 public:
  Glm4Moe(Backend& be, const ModelOptions& o, ModelConfig c)
      : LayerStack(be, o, std::move(c)), heads_(split_gqa_heads(cfg_, shard_)) {
    if ((shard_.split() || shard_.experts_split() || shard_.pipelined()) && o.load_mtp)
      throw Error("the multi-token-prediction block cannot run split across ranks yet: drop --spec mtp or --parallel");
  }

  // This stage's layers, and the MTP block's after them when it is loaded.
  KvLayout kv_layout() const override { return gqa_kv_layout(cfg_, heads_, first_, end_ + mtp_layers()); }

 private:
  struct Layer {
    std::vector<float> attn_norm, ffn_norm;
    GqaWeights attn;
    FfnWeights dense;  // the leading layers
    MoeWeights moe;    // or router + experts + shared experts
  };

  Layer load_block(const WeightLoader& ld, int l) {
    const std::string p = layer_prefix(l);
    const int64_t dim = cfg_.n_embd;
    Layer L;
    L.attn_norm = ld.require_vector(p + "attn_norm.weight", dim);
    // q/k head norms: all layers or none (GLM-4.5 355B has them; Air, 4.6 and 4.7 do not).
    L.attn = load_gqa(ld, be_, p, cfg_, heads_, shard_, {.qk_norm = ld.has(p + "attn_q_norm.weight")});
    L.ffn_norm = ld.require_vector(p + "post_attention_norm.weight", dim);
    if (moe_layer(l))
      L.moe = load_moe(ld, be_, p, dim, cfg_.moe, shard_);
    else
      L.dense = load_ffn(ld, be_, p, "", dim, cfg_.n_ff, false, shard_);
    return L;
  }

  void load_layer(const WeightLoader& ld, int l) override { layers_.push_back(load_block(ld, l)); }

  void load_extra(const WeightLoader& ld, const ModelOptions& o) override {
    mtp_ = load_nextn_block<Layer>(ld, o, [&](int l) { return load_block(ld, l); });
  }

  void allocate(int64_t max_rows) override {
    gqa_ = std::make_unique<GqaAttention>(be_, cfg_, heads_, max_rows);
    if (mtp_) allocate_nextn(max_rows);
  }

  const Layer& at(int layer) const {
    return layer == cfg_.n_layer ? mtp_->block : layers_[static_cast<size_t>(layer - first_)];
  }

  void attention(const LayerRows& r, Act y) override {
    const Layer& L = at(r.layer);
    gqa_->run(be_, L.attn, r, norm_rows(r, L.attn_norm), y);
  }

  void ffn(const LayerRows& r, Act y) override {
    const Layer& L = at(r.layer);
    feed_forward(L.dense, L.moe, FfnActivation::Silu, norm_rows(r, L.ffn_norm), r.n, y);
  }

  void log_fusion() const override {
    int qkv = 0, ffn = 0;
    for (const auto& L : layers_) {
      qkv += GqaAttention::fused(be_, L.attn);
      const FfnWeights* f = L.moe.present() ? L.moe.first_held() : &L.dense;
      ffn += f && be_.fuses(f->gate, f->up);
    }
    print_gqa_fusion(qkv, ffn, cfg_.n_layer, !layers_.empty() && !layers_[0].attn.q_norm.empty(),
                     "SwiGLU (dense, shared and routed experts)");
  }

  const GqaHeads heads_;
  std::vector<Layer> layers_;  // this rank's, from first_
  std::unique_ptr<MtpBlock<Layer>> mtp_;
  std::unique_ptr<GqaAttention> gqa_;
};

std::unique_ptr<Model> make(const GgufFile& f, Backend& be, const ModelOptions& o, ModelConfig c) {
  auto m = std::make_unique<Glm4Moe>(be, o, std::move(c));
  m->init(f, o);
  return m;
}

// llama.cpp's converter's keys and tensors (conversion/glm.py): half the head rotated, sigmoid gating with
// the selection bias, the shared expert, dense lead layers, the nextn block after the trunk.
void synth(SynthFile& out) {
  const SynthShape& s = out.shape();
  const SynthDeepseek& d = s.ds;
  const int64_t head = synth_head_dim(s), q_dim = s.heads * head, kv_dim = s.kv_heads * head;
  const int64_t blocks = s.layers + d.nextn;
  synth_sizes(out, blocks, s.kv_heads, head / 2, s.dec.rope_base, 1e-5f);
  out.u32("attention.key_length", head);
  out.u32("attention.value_length", head);
  synth_deepseek_experts(out, ExpertGating::Sigmoid);
  out.u32("leading_dense_block_count", d.dense_lead);
  if (d.nextn > 0) out.u32("nextn_predict_layers", d.nextn);
  const float in_std = SynthFile::fan_in(s.dim);
  const bool qk_norm = s.dec.qk_norm;  // the 355B form
  for (int64_t l = 0; l < blocks; l++) {
    const std::string p = fmt::format("blk.{}.", l);
    out.norm(p + "attn_norm.weight", s.dim);
    out.qkv(p, q_dim, kv_dim, 0.1f);
    if (qk_norm) {
      out.random(p + "attn_q_norm.weight", {head}, 0.1f, 1.0f);
      out.random(p + "attn_k_norm.weight", {head}, 0.1f, 1.0f);
    }
    out.random(p + "attn_output.weight", {q_dim, s.dim}, out.residual_std(q_dim));
    out.norm(p + "post_attention_norm.weight", s.dim);
    if (l < d.dense_lead) {
      out.gated_ffn(p, "", s.ffn);
    } else {
      out.random(p + "ffn_gate_inp.weight", {s.dim, d.experts}, in_std);
      out.random(p + "exp_probs_b.bias", {d.experts}, 0.05f);
      out.gated_ffn(p, "_exps", d.ffn_expert, {d.experts});
      if (d.experts_shared > 0) out.gated_ffn(p, "_shexp", d.ffn_expert * d.experts_shared);
    }
    if (l >= s.layers) {  // the MTP block's own tensors
      out.random(p + "nextn.eh_proj.weight", {2 * s.dim, s.dim}, SynthFile::fan_in(2 * s.dim));
      out.norm(p + "nextn.enorm.weight", s.dim);
      out.norm(p + "nextn.hnorm.weight", s.dim);
      out.norm(p + "nextn.shared_head_norm.weight", s.dim);
    }
  }
}

SynthShape shape(int64_t dim, int64_t layers, int64_t heads, int64_t kv, int64_t head_dim, int64_t ffn, int64_t vocab,
                 int64_t experts, int64_t used, int64_t ffn_expert, int64_t dense_lead, bool qk_norm, float base) {
  SynthShape s = synth_shape("glm4moe", dim, layers, heads, kv, ffn, vocab, 131072,
                             SynthDecoder{.head_dim = head_dim, .rope_base = base});
  SynthDeepseek& d = s.ds;
  d.experts = experts, d.experts_used = used, d.experts_shared = 1, d.ffn_expert = ffn_expert;
  d.dense_lead = dense_lead, d.sigmoid = true, d.norm_weights = true, d.weights_scale = 2.5f, d.nextn = 1;
  s.dec.qk_norm = qk_norm;
  return s;
}

std::vector<SynthPreset> presets() {
  // tiny: a dense first layer, then 8 experts (top-2) + a shared one, q/k norms, half of each 32-wide head
  // rotated, an MTP block; tiny-air: the same without q/k norms.
  SynthShape tiny = shape(64, 3, 4, 2, 32, 192, 512, 8, 2, 32, 1, true, 1e6f);
  tiny.ctx = 512;
  SynthShape air = shape(64, 3, 4, 2, 32, 192, 512, 8, 2, 32, 1, false, 1e6f);
  air.ctx = 512;
  return {
      {"tiny", tiny},
      {"tiny-air", air},
      {"air", shape(4096, 46, 96, 8, 128, 10944, 151552, 128, 8, 1408, 1, false, 1e6f)},   // GLM-4.5-Air
      {"4.5", shape(5120, 92, 96, 8, 128, 12288, 151552, 160, 8, 1536, 3, true, 1e6f)},    // GLM-4.5 / 4.6
  };
}

}  // namespace

const Family& glm4moe_family() {
  static const Family f{"glm4moe", "GLM-4.5, GLM-4.5-Air, GLM-4.6, GLM-4.7", kRecipe, read, make, synth, presets,
                        /*awq_folds=*/false, /*quant_70b_layers=*/0, /*max_mtp=*/1};
  return f;
}

}  // namespace kestrel

#include "model/arch/gemma_layer.h"

#include <cmath>

#include "model/gqa_attention.h"
#include "model/hparams_common.h"
#include "model/layer_stack.h"

namespace kestrel {

ModelConfig read_gemma_common(HparamReader& h, int n_layer_27b) {
  ModelConfig c = read_decoder_basics(h, RopeStyle::NeoX);
  c.embed_scale = std::sqrt(static_cast<float>(c.n_embd));
  const int64_t query_pre_attn = c.n_layer == n_layer_27b ? c.n_embd / c.n_head : c.head_dim;
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(query_pre_attn));
  return c;
}

namespace {

class GemmaLayers final : public LayerStack {
 public:
  GemmaLayers(Backend& be, const ModelOptions& o, ModelConfig c, const LayerRecipe& recipe)
      : LayerStack(be, o, std::move(c)), recipe_(recipe), heads_(split_gqa_heads(cfg_, shard_)) {}

  KvLayout kv_layout() const override { return gqa_kv_layout(cfg_, heads_, first_, end_); }

 private:
  struct Layer {
    std::vector<float> attn_norm, post_attn_norm, ffn_norm, post_ffn_norm;
    GqaWeights attn;
    FfnWeights ffn;
  };

  void load_layer(const WeightLoader& ld, int l) override {
    const std::string p = layer_prefix(l);
    const int64_t dim = cfg_.n_embd;
    Layer& L = layers_.emplace_back();
    L.attn_norm = ld.require_vector(p + "attn_norm.weight", dim);
    L.attn = load_gqa(ld, be_, p, cfg_, heads_, shard_, {recipe_.qk_norm, false});
    L.post_attn_norm = ld.require_vector(p + "post_attention_norm.weight", dim);
    L.ffn_norm = ld.require_vector(p + "ffn_norm.weight", dim);
    L.ffn = load_ffn(ld, be_, p, "", dim, cfg_.n_ff, false, shard_);
    L.post_ffn_norm = ld.require_vector(p + "post_ffw_norm.weight", dim);
  }

  void allocate(int64_t max_rows) override { gqa_ = std::make_unique<GqaAttention>(be_, cfg_, heads_, max_rows); }

  const Layer& at(int layer) const { return layers_[static_cast<size_t>(layer - first_)]; }

  void attention(const LayerRows& r, Act y) override {
    const Layer& L = at(r.layer);
    gqa_->run(be_, L.attn, r, norm_rows(r, L.attn_norm), y);
  }

  void ffn(const LayerRows& r, Act y) override {
    const Layer& L = at(r.layer);
    feed_forward(L.ffn, {}, FfnActivation::Gelu, norm_rows(r, L.ffn_norm), r.n, y);
  }

  // Each branch's output normed before it joins the residual stream.
  void residual(int layer, Branch branch, Act x, Act y, int64_t r0, int64_t n) override {
    const Layer& L = at(layer);
    const std::vector<float>& post = branch == Branch::Attention ? L.post_attn_norm : L.post_ffn_norm;
    be_.rmsnorm(y, post.data(), y, n, cfg_.n_embd, cfg_.rms_eps);
    LayerStack::residual(layer, branch, x, y, r0, n);
  }

  void log_fusion() const override {
    int qkv = 0, ffn = 0;
    for (const auto& L : layers_) {
      qkv += GqaAttention::fused(be_, L.attn);
      ffn += be_.fuses(L.ffn.gate, L.ffn.up);
    }
    print_gqa_fusion(qkv, ffn, cfg_.n_layer, recipe_.qk_norm, "GeGLU");
  }

  const LayerRecipe recipe_;
  const GqaHeads heads_;
  std::vector<Layer> layers_;  // this rank's, from first_
  std::unique_ptr<GqaAttention> gqa_;
};

}  // namespace

std::unique_ptr<Model> make_gemma_layers(const GgufFile& f, Backend& be, const ModelOptions& o, ModelConfig c,
                                         const LayerRecipe& recipe) {
  auto m = std::make_unique<GemmaLayers>(be, o, std::move(c), recipe);
  m->init(f, o);
  return m;
}

}  // namespace kestrel

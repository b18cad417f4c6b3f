#include "model/arch/llama_layer.h"

#include "model/gqa_attention.h"
#include "model/hparams_common.h"
#include "model/layer_stack.h"

namespace kestrel {
namespace {

class LlamaLayers final : public LayerStack {
 public:
  LlamaLayers(Backend& be, const ModelOptions& o, ModelConfig c, const LayerRecipe& recipe, RopeFactors factors)
      : LayerStack(be, o, std::move(c)), recipe_(recipe), factors_(factors), heads_(split_gqa_heads(cfg_, shard_)) {}

  KvLayout kv_layout() const override { return gqa_kv_layout(cfg_, heads_, first_, end_); }

 private:
  struct Layer {
    std::vector<float> attn_norm, ffn_norm;
    GqaWeights attn;
    FfnWeights ffn;  // dense
    MoeWeights moe;  // or experts
  };

  void load_extra(const WeightLoader& ld, const ModelOptions& o) override {
    if (factors_ == RopeFactors::Llama3) rope_factors_ = load_rope_freqs(ld, cfg_);
    if (factors_ == RopeFactors::LongRope) rope_factors_ = load_longrope_factors(ld, cfg_, o.n_ctx);
    use_rope_factors(cfg_, rope_factors_);
  }

  void load_layer(const WeightLoader& ld, int l) override {
    const std::string p = layer_prefix(l);
    const int64_t dim = cfg_.n_embd;
    Layer& L = layers_.emplace_back();
    L.attn_norm = ld.require_vector(p + "attn_norm.weight", dim);
    L.attn = load_gqa(ld, be_, p, cfg_, heads_, shard_, {recipe_.qk_norm, recipe_.fused_qkv, recipe_.attn_sinks});
    const bool post = recipe_.ffn_norm == LayerRecipe::FfnNorm::PostAttention;  // gpt-oss's name for it
    L.ffn_norm = ld.require_vector(p + (post ? "post_attention_norm.weight" : "ffn_norm.weight"), dim);
    if (moe_layer(l))
      L.moe = load_moe(ld, be_, p, dim, cfg_.moe, shard_);
    else
      L.ffn = load_ffn(ld, be_, p, "", dim, cfg_.n_ff, recipe_.fused_gate_up, shard_);
  }

  void allocate(int64_t max_rows) override { gqa_ = std::make_unique<GqaAttention>(be_, cfg_, heads_, max_rows); }

  const Layer& at(const LayerRows& r) const { return layers_[static_cast<size_t>(r.layer - first_)]; }

  void attention(const LayerRows& r, Act y) override {
    const Layer& L = at(r);
    gqa_->run(be_, L.attn, r, norm_rows(r, L.attn_norm), y);
  }

  void ffn(const LayerRows& r, Act y) override {
    const Layer& L = at(r);
    feed_forward(L.ffn, L.moe, FfnActivation::Silu, norm_rows(r, L.ffn_norm), r.n, y);
  }

  void log_fusion() const override {
    int qkv = 0, ffn = 0;
    for (const auto& L : layers_) {
      qkv += GqaAttention::fused(be_, L.attn);
      const FfnWeights* f = L.moe.present() ? L.moe.first_held() : &L.ffn;
      ffn += f && be_.fuses(f->gate, f->up);
    }
    print_gqa_fusion(qkv, ffn, cfg_.n_layer, recipe_.qk_norm,
                     cfg_.moe.routing.n_expert > 0 ? "SwiGLU (each routed expert)" : "SwiGLU");
  }

  const LayerRecipe recipe_;
  const RopeFactors factors_;
  const GqaHeads heads_;
  std::vector<float> rope_factors_;  // what cfg_.rope.freq_factors points at
  std::vector<Layer> layers_;        // this rank's, from first_
  std::unique_ptr<GqaAttention> gqa_;
};

}  // namespace

void read_qwen_experts(HparamReader& h, ModelConfig& c, bool normalize) {
  const int64_t used = h.need_int("expert_used_count");
  read_routed_experts(h, c, h.int_or("expert_feed_forward_length", c.n_ff / used), normalize);
}

std::unique_ptr<Model> make_llama_layers(const GgufFile& f, Backend& be, const ModelOptions& o, ModelConfig c,
                                         const LayerRecipe& recipe, RopeFactors factors) {
  auto m = std::make_unique<LlamaLayers>(be, o, std::move(c), recipe, factors);
  m->init(f, o);
  return m;
}

}  // namespace kestrel

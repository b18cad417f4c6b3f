// GLM-5 (`glm-dsa`): DeepSeek-V3.2's design (MLA, DeepSeekMoE with sigmoid routing, DeepSeek Sparse
// Attention) run by the deepseek2 family's parts, as llama.cpp's llama_model_glm_dsa, with its
// differences: the indexer rotates adjacent pairs (llama.cpp's NORM RoPE) where V3.2's rotates NeoX
// halves; only "full" layers (attention.indexer.types) have an indexer, the others reuse the previous full
// layer's top-k (GLM-5.2: two full layers, then one in four); the router is sigmoid when the file does not
// say; the tokenizer is glm4's (tokenizer/pretokenizer.cpp).
#include <fmt/format.h>

#include "core/error.h"
#include "model/arch/families.h"
#include "model/mla_attention.h"

namespace kestrel {
namespace {

// llama.cpp's default indexer types without the key: every layer full before GLM-5.2 (contexts below
// 1M), else GLM-5.2's published pattern (two full layers, then one full in every four, for 78 layers).
std::vector<uint8_t> default_shared(int n_layer, int64_t n_ctx_train) {
  std::vector<uint8_t> shared(static_cast<size_t>(n_layer), 0);
  if (n_ctx_train < 1048576) return shared;
  for (int l = 0; l < n_layer; l++) shared[l] = l >= 78 || (l >= 2 && (l - 2) % 4 != 0);
  return shared;
}

ModelConfig read(HparamReader& h, const ModelOptions& o) {
  const bool gating = h.has("expert_gating_func");
  ModelConfig c = deepseek2_family().read(h, o);
  if (!gating) c.moe.routing.gating = ExpertGating::Sigmoid;  // llama.cpp's default for GLM
  if (h.has("rope.scaling.type") && h.opt_string("rope.scaling.type") != "none")
    throw h.bad("rope.scaling.type", "is not supported for glm-dsa (llama.cpp reads no YaRN correction for it)");
  read_dsa_indexer(h, c);
  MlaConfig::Indexer& ix = c.mla.indexer;
  ix.rope_style = RopeStyle::Adjacent;
  const std::string key = "attention.indexer.types";
  ix.shared = default_shared(c.n_layer, c.n_ctx_train);
  if (const GgufValue* v = h.file().find(h.arch() + "." + key)) {
    h.accept(key);
    if (v->type == GgufValueType::ARRAY) {
      const GgufArray& a = v->as_array();
      if (static_cast<int>(a.items.size()) != c.n_layer)
        throw h.bad(key, fmt::format("has {} entries for {} layers", a.items.size(), c.n_layer));
      for (int l = 0; l < c.n_layer; l++) ix.shared[l] = a.items[l].as_int() == 0;
    } else {
      std::fill(ix.shared.begin(), ix.shared.end(), v->as_int() == 0);
    }
  }
  if (ix.shares(0)) throw h.bad(key, "makes layer 0 reuse a selection no earlier layer made");
  return c;
}

// deepseek2's keys and tensors, the indexer's on the full layers, and the types when a layer shares.
void synth(SynthFile& out) {
  deepseek2_family().synth(out);
  const SynthShape& s = out.shape();
  const std::vector<uint8_t>& shared = s.ds.idx_shared;
  std::vector<uint8_t> full(static_cast<size_t>(s.layers + s.ds.nextn), 0);
  std::vector<GgufValue> types;
  for (int64_t l = 0; l < s.layers; l++) {
    full[l] = !(l < static_cast<int64_t>(shared.size()) && shared[l]);
    types.push_back(GgufValue::boolean(full[l] != 0));
  }
  if (!full[0]) throw Error("glm-dsa: layer 0 must have its own indexer");
  synth_dsa_indexer(out, full);
  if (std::find(full.begin(), full.begin() + s.layers, 0) != full.begin() + s.layers)
    out.writer().set(s.arch + ".attention.indexer.types", GgufValue::array(GgufValueType::BOOL, types));
}

SynthShape preset_shape(const std::string& preset) {
  SynthShape s;
  s.arch = "glm-dsa";
  SynthDeepseek& d = s.ds;
  d.sigmoid = d.selection_bias = d.norm_weights = true, d.weights_scale = 2.5f;
  if (preset == "tiny") {
    // GLM-5's features at test width: four layers (a dense first one) whose indexers are full, shared,
    // full, shared; top-k 4; adjacent-pair RoPE in the indexer; one MTP block.
    s.dim = 64, s.layers = 4, s.heads = 4, s.ffn = 128, s.vocab = 512, s.ctx = 4096;
    d.q_lora = 48, d.kv_lora = 32, d.qk_nope = 16, d.qk_rope = 8, d.v_head = 16;
    d.experts = 16, d.experts_used = 4, d.experts_shared = 1, d.ffn_expert = 32, d.groups = 1, d.groups_used = 1;
    d.idx_heads = 16, d.idx_dim = 64, d.idx_top_k = 4;
    d.idx_shared = {0, 1, 0, 1};
    d.nextn = 1;
  } else {  // glm5: GLM-5 (744B, 40B active), every indexer full
    s.dim = 6144, s.layers = 78, s.heads = 64, s.ffn = 12288, s.vocab = 154880, s.ctx = 202752;
    d.q_lora = 2048, d.kv_lora = 512, d.qk_nope = 192, d.qk_rope = 64, d.v_head = 256;
    d.dense_lead = 3, d.experts = 256, d.experts_used = 8, d.experts_shared = 1, d.ffn_expert = 2048;
    d.idx_heads = 32, d.idx_dim = 128, d.idx_top_k = 2048;
    d.nextn = 1;
  }
  s.kv_heads = s.heads;
  return s;
}

std::vector<SynthPreset> presets() { return {{"tiny", preset_shape("tiny")}, {"glm5", preset_shape("glm5")}}; }

}  // namespace

const Family& glm_dsa_family() {
  static const Family f = [] {
    Family m = deepseek2_family();
    m.name = "glm-dsa";
    m.models = "GLM-5, GLM-5.1, GLM-5.2";
    m.read = read;
    m.synth = synth;
    m.presets = presets;
    return m;
  }();
  return f;
}

}  // namespace kestrel

// DeepSeek-V3.2 (`deepseek32`): DeepSeek-V3's layers (MLA, DeepSeekMoE, the MTP block), run by the
// deepseek2 family's parts, plus DeepSeek Sparse Attention in every trunk layer: a lightning indexer
// scores each earlier position and each query attends only to its top_k (model/mla_attention.h has the
// math; ops/lightning_indexer.h the selection). As llama.cpp's llama_model_deepseek32: the indexer's
// keys cached per position beside the latent (the cache's V row), NeoX RoPE on the indexer heads' leading
// rope dims, a Hadamard rotation of its queries and keys, LayerNorm (eps 1e-6) of its key; the MTP block
// attends densely.
#include <fmt/format.h>

#include "core/error.h"
#include "model/arch/families.h"
#include "model/hparams_reader.h"
#include "model/mla_attention.h"

namespace kestrel {
namespace {

ModelConfig read(HparamReader& h, const ModelOptions& o) {
  ModelConfig c = deepseek2_family().read(h, o);
  h.need_int("expert_gating_func");  // llama.cpp requires it here (V2's files predate it)
  read_dsa_indexer(h, c);
  return c;
}

// deepseek2's keys and tensors, then the indexer's (MTP blocks too, as llama.cpp's loader requires them
// there).
void synth(SynthFile& out) {
  deepseek2_family().synth(out);
  synth_dsa_indexer(out, std::vector<uint8_t>(static_cast<size_t>(out.shape().layers + out.shape().ds.nextn), 1));
}

SynthShape preset_shape(const std::string& preset) {
  SynthShape s;
  s.arch = "deepseek32";
  SynthDeepseek& d = s.ds;
  d.sigmoid = d.selection_bias = d.norm_weights = true, d.weights_scale = 2.5f;
  if (preset == "tiny") {
    // V3.2's features at test width: a top-k of 4 (prompts past 4 tokens select), 16 indexer heads of 64,
    // YaRN, expert groups, one MTP block. A score is exactly 0 when every head's relu is: with 8 heads that
    // happened at a top-k boundary in a 14-token prompt, where llama.cpp's ggml_top_k orders ties its own
    // way (ops/lightning_indexer.h); with 16 a zero score is 256 times rarer.
    s.dim = 64, s.layers = 3, s.heads = 4, s.ffn = 128, s.vocab = 512, s.ctx = 4096;
    d.q_lora = 48, d.kv_lora = 32, d.qk_nope = 16, d.qk_rope = 8, d.v_head = 16;
    d.experts = 16, d.experts_used = 4, d.experts_shared = 1, d.ffn_expert = 32, d.groups = 4, d.groups_used = 2;
    d.yarn_factor = 4.0f, d.yarn_orig_ctx = 1024;
    d.idx_heads = 16, d.idx_dim = 64, d.idx_top_k = 4;
    d.nextn = 1;
  } else if (preset == "attn-bench") {
    // V3.2's attention at its real widths (128 heads, latent 512 + 64, indexer 64 x 128, top-k 2048) in
    // two layers with a narrow dense FFN: what decode at long context spends is the attention.
    s.dim = 7168, s.layers = 2, s.heads = 128, s.ffn = 2048, s.vocab = 32000, s.ctx = 163840;
    d.q_lora = 1536, d.kv_lora = 512, d.qk_nope = 128, d.qk_rope = 64, d.v_head = 128;
    d.dense_lead = 2, d.experts = 8, d.experts_used = 2, d.experts_shared = 1, d.ffn_expert = 256;  // all dense
    d.idx_heads = 64, d.idx_dim = 128, d.idx_top_k = 2048;
    d.yarn_factor = 40.0f, d.yarn_orig_ctx = 4096, d.yarn_log_mul = 0.1f;
  } else {  // v32: DeepSeek-V3.2-Exp / V3.2 (671B)
    s.dim = 7168, s.layers = 61, s.heads = 128, s.ffn = 18432, s.vocab = 129280, s.ctx = 163840;
    d.q_lora = 1536, d.kv_lora = 512, d.qk_nope = 128, d.qk_rope = 64, d.v_head = 128;
    d.dense_lead = 3, d.experts = 256, d.experts_used = 8, d.experts_shared = 1, d.ffn_expert = 2048;
    d.groups = 8, d.groups_used = 4;
    d.yarn_factor = 40.0f, d.yarn_orig_ctx = 4096, d.yarn_log_mul = 0.1f;
    d.idx_heads = 64, d.idx_dim = 128, d.idx_top_k = 2048;
    d.nextn = 1;
  }
  s.kv_heads = s.heads;
  return s;
}

std::vector<SynthPreset> presets() {
  std::vector<SynthPreset> p;
  for (const char* name : {"tiny", "attn-bench", "v32"}) p.push_back({name, preset_shape(name)});
  return p;
}

}  // namespace

void read_dsa_indexer(HparamReader& h, ModelConfig& c) {
  h.need_int("attention.q_lora_rank");  // the indexer's queries come from the query bottleneck
  MlaConfig::Indexer& ix = c.mla.indexer;
  ix.n_head = static_cast<int>(h.need_int("attention.indexer.head_count"));
  ix.head_dim = static_cast<int>(h.need_int("attention.indexer.key_length"));
  ix.top_k = static_cast<int>(h.need_int("attention.indexer.top_k"));
  if (indexer_rotation_size(ix.head_dim) == 0)
    throw h.bad("attention.indexer.key_length",
                fmt::format("= {}: the indexer's Hadamard rotation needs a multiple of 64", ix.head_dim));
  if (ix.head_dim < c.mla.qk_rope)
    throw h.bad("attention.indexer.key_length",
                fmt::format("= {} is below the rotary dims ({})", ix.head_dim, c.mla.qk_rope));
  if (c.mla.q_lora_rank <= 0) throw h.bad("attention.q_lora_rank", "the indexer's queries need the query bottleneck");
}

void synth_dsa_indexer(SynthFile& out, const std::vector<uint8_t>& layers) {
  const SynthShape& s = out.shape();
  const SynthDeepseek& d = s.ds;
  if (d.idx_heads <= 0 || d.q_lora <= 0) throw Error(s.arch + ": the indexer needs heads and a query bottleneck");
  out.u32("attention.indexer.head_count", d.idx_heads);
  out.u32("attention.indexer.key_length", d.idx_dim);
  out.u32("attention.indexer.top_k", d.idx_top_k);
  for (size_t l = 0; l < layers.size(); l++) {
    if (!layers[l]) continue;
    const std::string p = fmt::format("blk.{}.indexer.", l);
    out.random(p + "attn_q_b.weight", {d.q_lora, d.idx_heads * d.idx_dim}, SynthFile::fan_in(d.q_lora));
    out.random(p + "attn_k.weight", {s.dim, d.idx_dim}, SynthFile::fan_in(s.dim));
    out.random(p + "k_norm.weight", {d.idx_dim}, 0.1f, 1.0f);
    out.random(p + "k_norm.bias", {d.idx_dim}, 0.1f);
    out.random(p + "proj.weight", {s.dim, d.idx_heads}, SynthFile::fan_in(s.dim));
  }
}

const Family& deepseek32_family() {
  static const Family f = [] {
    Family m = deepseek2_family();
    m.name = "deepseek32";
    m.models = "DeepSeek-V3.2-Exp, V3.2, V3.2-Speciale";
    m.read = read;
    m.synth = synth;
    m.presets = presets;
    return m;
  }();
  return f;
}

}  // namespace kestrel

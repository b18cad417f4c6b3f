#pragma once
// Random-weight models of a chosen architecture and shape, for tests and
// benchmarks when real weights are not at hand.
#include <any>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "formats/ggml_types.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "model/layer_recipe.h"

namespace kestrel {

// DeepSeek-V2/V3 extras (arch deepseek2): MLA sizes, MoE layout, YaRN.
struct SynthDeepseek {
  int64_t q_lora = 0, kv_lora = 0, qk_nope = 0, qk_rope = 0, v_head = 0;
  int64_t dense_lead = 1, experts = 0, experts_used = 0, experts_shared = 0, ffn_expert = 0;
  int64_t groups = 1, groups_used = 1;
  bool sigmoid = false, selection_bias = false, norm_weights = false;
  float weights_scale = 1.0f;
  float yarn_factor = 0.0f;  // 0: no YaRN
  int64_t yarn_orig_ctx = 0;
  float yarn_log_mul = 0.1f;
  int64_t nextn = 0;  // multi-token-prediction blocks after the trunk (DeepSeek-V3 has 1)
  float temp_scale = 0;  // the query temperature by position (0: none), MlaConfig::temp_scale
  int64_t temp_length = 0;
  // DeepSeek-V3.2's lightning indexer (deepseek32): heads, head size, top-k; 0 heads: none.
  int64_t idx_heads = 0, idx_dim = 0, idx_top_k = 0;
  std::vector<uint8_t> idx_shared;  // glm-dsa: per layer, 1 reuses the previous full layer's selection
};

// The GQA families' extras; what each architecture's tensors look like
// follows from `arch` (its family's synth part, model/arch/).
struct SynthDecoder {
  int64_t head_dim = 0;     // 0: dim / heads (Qwen3 and Gemma set their own)
  bool tied = false;        // no output.weight: the embedding is the output head
  float rope_base = 10000;
  // Llama 3.x: rope_freqs.weight from the converter's llama3 rule (factor,
  // low 1, high 4, original context); Gemma 3's global layers: linear scaling.
  float rope_factor = 0;
  int64_t rope_orig_ctx = 0;
  float yarn_log_mul = 0;   // Mistral 3's YaRN log multiplier (its rope_factor is YaRN's)
  float query_temp = 0;     // Mistral 3's query temperature scale (0: none)
  int64_t window = 0;       // sliding window (Gemma 2/3, Phi-3, gpt-oss)
  // Experts: Mixtral (llama), Qwen2-MoE (with a gated shared expert), Qwen3-MoE.
  int64_t experts = 0, experts_used = 0, ffn_expert = 0, ffn_shared = 0;
  bool qk_norm = false;     // glm4moe: q/k head norms (GLM-4.5 355B)
  int64_t moe_step = 1;     // llama4: experts on every moe_step-th layer
  // The token embedding's standard deviation (0: 1). Gemma 4's tiny presets: 1/sqrt(dim), so that the embedding
  // times sqrt(dim) is of the branches' size rather than drowning them.
  float embed_std = 0;
};

struct SynthShape {
  std::string arch = "llama";  // llama | qwen2 | qwen2moe | qwen3 | qwen3moe | phi3 | gemma2 | gemma3 | deepseek2
  int64_t dim = 0, layers = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0, ctx = 0;
  SynthDeepseek ds;  // the MLA families (deepseek2, deepseek32, mistral4)
  SynthDecoder dec;  // the others
  // A family's own extras (model/arch/<family>.h, e.g. deepseek4.h's SynthDsv4), through model/family_part.h.
  std::any family;
};

// A named shape of a family (model/arch/<family>.cpp lists its own).
struct SynthPreset {
  std::string name;
  SynthShape shape;
};

// The architectures synth writes and their presets (real models' shapes),
// "tiny" first: e.g. qwen3: tiny, 0.6b, 4b.
const std::vector<std::pair<std::string, std::vector<std::string>>>& synth_presets();
// Throws naming the known presets for an unknown (arch, preset).
SynthShape synth_preset(const std::string& arch, const std::string& preset);
// A GQA family's shape: dim, layers, heads, kv_heads, ffn, vocab, ctx, then the family's extras.
SynthShape synth_shape(const std::string& arch, int64_t dim, int64_t layers, int64_t heads, int64_t kv, int64_t ffn,
                       int64_t vocab, int64_t ctx, SynthDecoder dec = {});

struct SynthOptions {
  SynthShape shape;
  GgmlType type = GgmlType::F16;
  uint64_t seed = 1;
  const GgufFile* vocab_from = nullptr;  // copy this tokenizer (its size sets the vocab)
  int n_threads = 1;
  std::string name = "kestrel-synth";
};

// Checks the shape and returns a writer that generates each tensor as it is
// written (deterministic for a seed, whatever the thread count).
GgufWriter synth_model(const SynthOptions& options);


// What a family's synth part (Family::synth) writes into: its own metadata
// keys and its layers' tensors, in llama.cpp's names and layouts. synth_model
// writes what every family has (general keys, sizes, vocabulary, embedding,
// output head) and calls it.
class SynthFile {
 public:
  using AddFn = std::function<void(const std::string&, std::vector<int64_t>, float, float)>;
  SynthFile(GgufWriter& w, const SynthShape& s, AddFn add) : w_(w), s_(s), add_(std::move(add)) {}
  const SynthShape& shape() const { return s_; }
  GgufWriter& writer() { return w_; }
  // "{arch}.KEY" metadata.
  void u32(const std::string& key, int64_t v);
  void f32(const std::string& key, float v);
  void str(const std::string& key, const std::string& v);
  void boolean(const std::string& key, bool v);
  // A tensor of uniform random values with this standard deviation (0: every
  // value `constant`), stored in the file's type (routers stay F32).
  void random(const std::string& name, std::vector<int64_t> ne, float stddev, float constant = 0.0f) {
    add_(name, std::move(ne), stddev, constant);
  }
  void norm(const std::string& name, int64_t n) { random(name, {n}, 0.0f, 1.0f); }
  // An F32 tensor of exactly these values (RoPE factors), 1-D unless ne says its shape.
  void values(const std::string& name, const std::vector<float>& v, std::vector<int64_t> ne = {});
  // A gated FFN's three tensors `{prefix}ffn_{gate,up,down}{suffix}`, `extra`
  // dimensions appended (3-D experts); down shrunk by residual_scale().
  void gated_ffn(const std::string& prefix, const std::string& suffix, int64_t width,
                 const std::vector<int64_t>& extra = {});
  // A GQA layer's `{prefix}attn_{q,k,v}.weight` (q_dim and kv_dim rows over the embedding), then their
  // biases of this standard deviation when it is above 0.
  void qkv(const std::string& prefix, int64_t q_dim, int64_t kv_dim, float bias_std = 0.0f);
  // The standard deviation that keeps a projection's output near unit scale.
  static float fan_in(int64_t n) { return 1.0f / std::sqrt(static_cast<float>(n)); }
  // The two projections that write into the residual stream are shrunk by
  // this, so that the stream does not grow over the layers.
  float residual_scale() const { return 1.0f / std::sqrt(2.0f * static_cast<float>(s_.layers)); }
  // Such a projection's standard deviation for n inputs.
  float residual_std(int64_t n) const { return residual_scale() / std::sqrt(static_cast<float>(n)); }

 private:
  GgufWriter& w_;
  const SynthShape& s_;
  AddFn add_;
};

// The sizes every family writes: context, widths, block count (MTP blocks
// included), heads, RoPE dims and base, norm epsilon.
void synth_sizes(SynthFile& out, int64_t blocks, int64_t head_count_kv, int64_t rope_dims, float freq_base,
                 float rms_eps);
// A GQA family's keys (sizes, key/value length when the shape sets a head
// size, experts) after checking the shape; expert_ffn_key: the family names
// its experts' width (all but Mixtral, which uses feed_forward_length).
void synth_gqa_keys(SynthFile& out, float rms_eps, bool expert_ffn_key);
// The layers of a GQA family with this recipe: attention (fused or not,
// biases, head norms), post norms, FFN (fused gate/up), or router + experts
// (+ a gated shared expert when the shape has one).
void synth_gqa_layers(SynthFile& out, const LayerRecipe& recipe);
// The head size of a GQA shape (its own, or dim / heads).
int64_t synth_head_dim(const SynthShape& s);

}  // namespace kestrel

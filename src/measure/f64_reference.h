#pragma once
// A float64 forward pass of the grouped-query attention families (the math
// their LayerRecipe names, model/family.h: biases, q/k norms, RoPE with its
// frequency factors and per-layer bases, sliding windows, soft-caps, post
// norms, SwiGLU/GeGLU, experts with shared ones) and of the MLA families
// (DeepSeek-V2/V3, Mistral Small 4, DeepSeek-V3.2: multi-head latent
// attention written out per head — keys and values rebuilt from the latent,
// no absorption —, the query temperature, DeepSeekMoE routing with groups and
// the selection bias, and V3.2's lightning indexer and top-k selection, without
// its Hadamard rotation, which leaves q.k unchanged): weights dequantized
// exactly (to float), everything else in
// double, written independently of the kernels. precision-check compares
// the engine against it layer by layer.
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "model/family.h"
#include "model/lora.h"
#include "model/model.h"

namespace kestrel {

class F64Decoder {
 public:
  // c: the config the model was loaded with; n_ctx: the context it runs at
  // (Phi-3's LongRoPE factors depend on it). The RoPE frequency factors are
  // read from the file here, not taken from the model.
  F64Decoder(const GgufFile& f, const ModelConfig& c, int64_t n_ctx, int n_threads);

  // One sequence from position 0, all tokens in one pass.
  void run(const std::vector<int32_t>& tokens);
  // LoRA adapters at their user scales (model/lora.h): every product by a matrix an adapter names gets
  // scale * B . (A . x) in double, a routed expert's its expert's slices; the embedding its rows' update (the
  // decoder families' and MLA families' pass).
  void set_lora(std::vector<std::pair<const LoraAdapter*, float>> adapters) { lora_ = std::move(adapters); }

  // Per layer, every token's values (row-major [token][width]):
  std::vector<std::vector<double>> q_rope;     // queries after RoPE
  std::vector<std::vector<double>> attention;  // attention output, before Wo
  std::vector<std::vector<double>> attn_branch;  // what the attention adds to the residual
  std::vector<std::vector<double>> ffn_branch;   // what the FFN adds
  std::vector<std::vector<double>> residual;     // the residual stream after the layer
  std::vector<double> logits;
  // DeepSeek-V3.2 / GLM-5: per layer with an indexer of its own, per token, the positions its query
  // attends to (ascending; every earlier one below the indexer's top_k). Empty for the other layers.
  std::vector<std::vector<std::vector<int32_t>>> selected;

  // DeepSeek-V4: residual is every stream of the row (hc * n_embd per token); selected holds, per ratio-4
  // layer, every token's chosen blocks (block indices, ascending; none before its first completed block).

  // ops.cpp's rotation angle of pair i at pos and the cos/sin magnitude, in double.
  static double rope_angle(const RopeParams& p, int64_t pos, int i);
  static double rope_mscale(const RopeParams& p);

 private:
  using Vec = std::vector<double>;
  const GgufTensorInfo* tensor(const std::string& name) const;
  bool has(const std::string& name) const { return f_.find_tensor(name) != nullptr; }
  Vec vec(const std::string& name) const;
  // y[n][rows] = x[n][cols] . W^T for rows [r0, r0 + count) of a tensor (all: count -1).
  Vec matmul(const std::string& name, const Vec& x, int64_t n, int64_t r0 = 0, int64_t count = -1);
  Vec rmsnorm(const Vec& x, const Vec& w, int64_t rows, int64_t dim) const;
  void rope(Vec& x, int64_t n, int heads, const RopeParams& p) const { rope_at(x, n, heads, c_.head_dim, 0, p); }
  // Rotates dims [offset, offset + n_rot) of each head, heads `stride` apart.
  void rope_at(Vec& x, int64_t n, int heads, int64_t stride, int64_t offset, const RopeParams& p) const;
  // MLA attention of layer l (before Wo); records the indexer's selections.
  Vec mla_attend(int l, const Vec& xb, int64_t n);
  Vec gqa_attend(int l, const Vec& xb, int64_t n);
  std::vector<std::vector<int32_t>> indexer_select(const std::string& p, const Vec& xb, const Vec& q_a, int64_t n);
  Vec layernorm(const Vec& x, const Vec& w, const Vec& b, int64_t rows, int64_t dim, double eps) const;
  // head_dim / n_head_kv 0: the config's (Gemma 4's sliding layers give theirs).
  Vec attend(const Vec& q, const Vec& k, const Vec& v, int64_t n, int layer, int head_dim = 0, int n_head_kv = 0) const;
  // Gemma 4 (model/arch/gemma4.cpp has the math): its whole pass.
  void run_gemma4(const std::vector<int32_t>& tokens);
  // The linear-attention hybrids (model/arch/qwen35_layer.h has the math): their pass; a gated attention
  // block's and a Gated DeltaNet block's branch (recording q and the attention / recurrence output).
  void run_hybrid(const std::vector<int32_t>& tokens);
  Vec gated_attend(int l, const Vec& xb, int64_t n);
  Vec delta_net(int l, const Vec& xb, int64_t n);
  // GELU (tanh form) in double.
  static double gelu(double a) { return 0.5 * a * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (a + 0.044715 * a * a * a))); }
  void temper(Vec& q, int64_t n, int64_t width) const;
  void add_bias(Vec& y, const std::string& name) const;
  // DeepSeek-V4 (model/arch/deepseek4.cpp has the math): its whole pass, its attention, its experts.
  void run_dsv4(const std::vector<int32_t>& tokens);
  Vec dsv4_attend(int l, const Vec& xn, int64_t n);
  Vec dsv4_moe(int l, const Vec& x, const std::vector<int32_t>& tokens, int64_t n);
  // Rotates (or with inverse, turns back) the last n_rot dims of each of `heads` heads of width `stride`,
  // row t at pos[t].
  static void rope_tail(Vec& x, const std::vector<int64_t>& pos, int heads, int64_t stride, const RopeParams& p,
                        bool inverse = false);
  Vec ffn(const std::string& p, const Vec& x, int64_t n);
  // router_in: the rows the router reads when they are not x (Gemma 4).
  Vec moe(const std::string& p, const Vec& x, int64_t n, const Vec* router_in = nullptr);
  Vec gated(const std::string& p, const std::string& suffix, const Vec& x, int64_t n, int64_t width, bool gelu);

  const GgufFile& f_;
  const ModelConfig& c_;
  const LayerRecipe& recipe_;  // what the family's layer is made of (model/family.h)
  std::vector<std::vector<int32_t>> last_selection_;  // the last full indexer layer's
  std::vector<float> factors_;  // rope_freqs / rope_factors_{short,long}, from the file
  RopeParams rope_, rope_sliding_;
  ThreadPool pool_;
  std::vector<std::pair<const LoraAdapter*, float>> lora_;
  // y[n][rows] += the adapters' updates of the product by `name`'s rows [r0, r0 + rows).
  void add_lora(const std::string& name, const Vec& x, int64_t n, int64_t r0, int64_t rows, Vec& y);
};

}  // namespace kestrel

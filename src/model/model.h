#pragma once
// The boundary between the runtime and an architecture: a Model runs one
// batched forward step over a paged KV cache and returns logits for the rows
// the batch asked for. Everything else (tokens, sampling, scheduling) is outside.
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/backend.h"
#include "kernels/moe_route.h"
#include "kernels/ops.h"
#include "model/gguf.h"
#include "runtime/batch.h"
#include "runtime/kv_cache.h"

namespace kestrel {

// Multi-head latent attention (DeepSeek-V2/V3): keys and values are
// compressed into a kv_lora_rank latent per token plus a shared rotary key
// of qk_rope dims; queries optionally through a q_lora_rank bottleneck.
struct MlaConfig {
  int q_lora_rank = 0;   // 0: queries straight from the hidden state (V2-Lite)
  int kv_lora_rank = 0;  // 0: not MLA
  int qk_nope = 0;       // per-head query/key dims without RoPE
  int qk_rope = 0;       // per-head (query) and shared (key) rotary dims
  int v_head = 0;        // per-head value dims
};

// DeepSeekMoE: routed experts (see kernels/moe_route.h) plus always-on shared ones.
struct MoeConfig {
  int n_dense_lead = 0;  // leading layers with a dense FFN
  MoeRouting routing;    // routing.n_expert 0: every layer dense
  int n_shared = 0;      // shared experts (their FFN is n_shared * n_ff_expert wide)
  int64_t n_ff_expert = 0;
};

struct ModelConfig {
  std::string arch;        // general.architecture
  std::string name;        // general.name
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  int64_t n_ff = 0;
  int64_t n_ctx_train = 0;
  float rms_eps = 1e-5f;
  RopeParams rope;
  bool qkv_bias = false;
  bool tied_output = false;
  MlaConfig mla;
  MoeConfig moe;
  float attn_scale = 0.0f;  // softmax scale of q.k; 0: 1/sqrt(head_dim)
  // Multi-token prediction blocks the file carries after the n_layer trunk
  // blocks (DeepSeek-V3's `nextn` layers, `{arch}.nextn_predict_layers`).
  int n_mtp = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  virtual KvLayout kv_layout() const = 0;
  virtual int64_t max_batch_tokens() const = 0;
  // Runs the batch (reserving KV positions as needed) and writes one row of
  // n_vocab logits per row with want_logits set, in batch order. With hidden
  // set, also every row's final hidden state (after the output norm, n_embd
  // floats per row): what a multi-token-prediction head reads.
  virtual void forward(const Batch& batch, PagedKvCache& kv, float* logits, float* hidden = nullptr) = 0;

  // Multi-token prediction (DeepSeek-V3 `nextn` layers, loaded with
  // ModelOptions::load_mtp): 0 when the model has none loaded.
  virtual int mtp_layers() const { return 0; }
  // Runs the first MTP layer: row i carries token x_{p+1} at position p and
  // hidden_in row i, the target's final hidden state at p (or the previous
  // MTP step's output when chaining drafts). Its logits predict x_{p+2};
  // hidden_out (may be null) gets each row's output state. Its keys and values go to the
  // KV cache's layers after the trunk's, at position p.
  virtual void forward_mtp(const Batch& batch, const float* hidden_in, PagedKvCache& kv, float* logits,
                           float* hidden_out);
};

// How MLA attention runs (DeepSeek models; others ignore it).
enum class MlaAttention {
  Auto,          // per step, whichever the cost model says is cheaper
  Absorbed,      // attend over the latent cache (attn_k_b folded into the query, attn_v_b into the output)
  Decompressed,  // rebuild per-head keys and values from the latent, then plain multi-head attention
};

struct ModelOptions {
  int64_t max_batch_tokens = 512;
  bool log_fusion = false;  // print which fused operators are used, at load
  MlaAttention mla = MlaAttention::Auto;
  bool load_mtp = false;  // load the file's multi-token-prediction layers (and cache for them)
};

// Picks the architecture from general.architecture. The GgufFile must outlive the model.
std::unique_ptr<Model> load_model(const GgufFile& file, Backend& backend, const ModelOptions& options);

}  // namespace kestrel

#pragma once
// The boundary between the runtime and an architecture: a Model runs one
// batched forward step over a paged KV cache and returns logits for the rows
// the batch asked for. Everything else (tokens, sampling, scheduling) is outside.
#include <any>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "kernels/moe_route.h"
#include "kernels/ops.h"
#include "gguf/gguf.h"
#include "model/batch.h"
#include "model/control_vector.h"
#include "parallel/tensor_shard.h"
#include "kv/kv_cache.h"

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
  // DeepSeek Sparse Attention (V3.2, `deepseek32`): a lightning indexer scores every earlier position
  // and each query attends only to its top_k (ops/lightning_indexer.h). n_head 0: dense MLA.
  struct Indexer {
    int n_head = 0;
    int head_dim = 0;  // per head [rope (qk_rope dims) | rest]; the cached key is one such head
    int top_k = 0;
    RopeStyle rope_style = RopeStyle::NeoX;  // V3.2's; GLM-5 rotates adjacent pairs
    // Per trunk layer, 1: no indexer of its own, the previous full layer's selection reused (GLM-5.2).
    std::vector<uint8_t> shared;
    bool shares(int layer) const { return layer < static_cast<int>(shared.size()) && shared[layer]; }
  } indexer;
};

enum class FfnActivation {
  Silu,  // SwiGLU: silu(gate) * up
  Gelu,  // GeGLU (Gemma): gelu_tanh(gate) * up
};

// Mixture of experts (DeepSeekMoE, Mixtral, Qwen2/3-MoE): routed experts (see
// kernels/moe_route.h) plus optional always-on shared ones.
struct MoeConfig {
  int n_dense_lead = 0;  // leading layers with a dense FFN
  MoeRouting routing;    // routing.n_expert 0: every layer dense
  int64_t n_ff_expert = 0;
  int64_t n_ff_shared = 0;   // the shared experts, run as one FFN this wide (0: none)
  bool shared_gate = false;  // Qwen2-MoE: sigmoid(x . ffn_gate_inp_shexp) scales the shared expert
  // A clamped SwiGLU in the routed experts (ops.h swiglu_oai, ggml_swiglu_oai: gpt-oss) at swiglu_alpha > 0,
  // its inputs clamped at swiglu_limit; 0: plain SwiGLU.
  float swiglu_alpha = 0.0f, swiglu_limit = 0.0f;
  // Llama 4: the experts on layers l with (l + 1) % layer_step == 0 only (interleave_moe_layer_step; 1: all
  // past n_dense_lead), and each chosen weight applied to the expert's input instead of its output.
  int layer_step = 1;
  bool weight_input = false;
  FfnActivation expert_act = FfnActivation::Silu;  // the routed experts' (Gemma 4: GeGLU)
  // Gemma 4: every MoE layer runs a dense FFN (feed_forward_length wide) beside its experts.
  bool dense_beside = false;
};

// Query temperature by position (Llama 4's; Mistral 3 / Large 3 / Small 4 files): the queries of position p
// times log(floor((p + offset) / length) + 1) * scale + 1, as llama.cpp computes it (in double, rounded to
// float once). scale 0: none.
struct QueryTemperature {
  float scale = 0;
  int length = 0;
  float offset = 0;
  bool nope_only = false;  // Llama 4: only on the layers without RoPE
  bool on() const { return scale != 0; }
  bool on_layer(const RopeParams& layer_rope) const { return on() && (!nope_only || layer_rope.n_rot == 0); }
  float at(int32_t p) const {
    const float blocks = std::floor((static_cast<float>(p) + offset) / static_cast<float>(length));
    return static_cast<float>(std::log(static_cast<double>(blocks) + 1.0) * static_cast<double>(scale) + 1.0);
  }
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
  int64_t n_ctx_orig = 0;  // rope.scaling.original_context_length (LongRoPE, YaRN): the pre-training context
  float rms_eps = 1e-5f;
  RopeParams rope;
  // Qwen3.5's interleaved multi-section RoPE (`rope.dimension_sections`, llama.cpp's IMROPE): rotary pair i turns
  // by its row's temporal, height or width position (model/batch.h's rope_pos) as section i % sum says (t, h, w
  // in turn while each lasts); all zero: one position per row. Text rows carry one position in all three.
  int rope_sections[4] = {0, 0, 0, 0};
  // Media rows attended both ways (Batch::horizons) see each other only on sliding-window layers; full-attention
  // layers keep them causal (llama.cpp's LLAMA_NON_CAUSAL_TYPE_SWA_ONLY: Gemma 4).
  bool both_ways_sliding_only = false;
  bool tied_output = false;
  MlaConfig mla;
  MoeConfig moe;
  float attn_scale = 0.0f;  // softmax scale of q.k; 0: 1/sqrt(head_dim)
  QueryTemperature query_temp;
  bool rope_qk_norm = false;  // Llama 4 Scout: a weightless RMSNorm of each q and k head after RoPE (RoPE layers)
  // Multi-token prediction blocks the file carries after the n_layer trunk
  // blocks (DeepSeek-V3's `nextn` layers, `{arch}.nextn_predict_layers`).
  int n_mtp = 0;
  // `{arch}.pooling_type` (embedding and reranking models): how a sequence's rows become one vector —
  // 0 none, 1 mean, 2 cls (the first row), 3 last, 4 rank; -1: the file says nothing.
  int pooling_type = -1;
  // A reranker's classification head: its labels (`{arch}.classifier.output_labels`, Qwen3-Reranker: yes, no).
  std::vector<std::string> classifier_labels;
  // The family's own hyperparameters (model/arch/<family>.h, e.g. deepseek4.h's Dsv4Config), through
  // model/family_part.h's family_part<T>.
  std::any family;

  // Numbers the families' layers read from their files (what a layer is
  // made of is its family's LayerRecipe, model/family.h).
  float embed_scale = 1.0f;    // embeddings multiplied by this (Gemma: sqrt(n_embd))
  float attn_softcap = 0.0f;   // attention logits: cap * tanh(s / cap) (Gemma 2); 0: none
  float final_softcap = 0.0f;  // output logits likewise (Gemma 2); 0: none
  // Sliding-window attention: layers with sliding_layers[l] set attend over
  // the last sliding_window positions, with rope_sliding (Gemma 3 gives
  // them their own RoPE base); the others over everything, with rope.
  int32_t sliding_window = 0;
  std::vector<uint8_t> sliding_layers;
  RopeParams rope_sliding;

  bool is_sliding(int layer) const {
    return sliding_window > 0 && layer < static_cast<int>(sliding_layers.size()) && sliding_layers[layer];
  }
  // Llama 4: the sliding layers' window is a chunk instead — a query sees the keys of its own chunk of
  // sliding_window positions (the cache keeps the same window's blocks).
  bool window_chunked = false;
  int32_t window(int layer) const { return is_sliding(layer) && !window_chunked ? sliding_window : 0; }
  int32_t chunk(int layer) const { return is_sliding(layer) && window_chunked ? sliding_window : 0; }
  const RopeParams& rope_of(int layer) const { return is_sliding(layer) ? rope_sliding : rope; }
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  virtual KvLayout kv_layout() const = 0;
  virtual int64_t max_batch_tokens() const = 0;
  // Runs the batch over rows already placed in the cache (their slots and
  // block tables: model/batch_io.h's place_batch of what the scheduler
  // allocated, or a tensor-parallel leader's placement) and writes one row of
  // n_vocab logits per row with want_logits set, in batch order. With hidden
  // set, also every row's final hidden state, hidden_dim() floats per row:
  // what a multi-token-prediction head reads. logits may be
  // null (a tensor-parallel rank that does not sample). The model never
  // allocates cache blocks: the scheduler alone does.
  virtual void forward(const Batch& batch, const BatchPlacement& placement, KvStore& kv, float* logits,
                       float* hidden = nullptr) = 0;
  // Whether forward() honours Batch::best (the best candidates instead of logits rows): where the backend's
  // argmax and top-k save downloading the rows (a GPU's).
  virtual bool best_on_device() const { return false; }

  // Pipelining across steps (rank 0 of a job split by pp): up to this many
  // steps started before the first is finished, each over requests the
  // others do not hold, so that step k+1 runs in stage 0 while step k is in
  // stage 1. 1: a step is forward() (no start/finish).
  virtual int steps_in_flight() const { return 1; }
  // forward() in two halves: start sends the step on (batch, placement and
  // kv must stay until finish, which writes its logits); slot <
  // steps_in_flight() is free again after its finish. Steps finish in the
  // order started.
  virtual void start_forward(const Batch& batch, const BatchPlacement& placement, KvStore& kv, int slot);
  virtual void finish_forward(int slot, float* logits);

  // Multi-token prediction (DeepSeek-V3 `nextn` layers, loaded with
  // ModelOptions::load_mtp): 0 when the model has none loaded.
  virtual int mtp_layers() const { return 0; }
  // The floats of one row of forward()'s hidden and forward_mtp()'s states: the state after the output
  // norm (n_embd), or DeepSeek-V4's residual streams before its head (n_embd per stream), as llama.cpp's
  // h_nextn.
  virtual int64_t hidden_dim() const { return config().n_embd; }
  // A reranking model (pooling rank): its classification head over a pooled final state (hidden_dim floats),
  // one score per label, softmaxed as llama.cpp does for Qwen3's rerankers. Empty when the model has none.
  virtual std::vector<float> classify(const float* /*pooled*/) const { return {}; }
  // Control vectors (model/control_vector.h): layer il's vector added to every row's residual stream at the end of
  // layer il from the next step on (null: none). A model whose llama.cpp graph applies none refuses (Error).
  virtual void set_control_vector(std::shared_ptr<const ControlVector> cv);
  // Runs the first MTP layer: row i carries token x_{p+1} at position p and
  // hidden_in row i, the target's final hidden state at p (or the previous
  // MTP step's output when chaining drafts). Its logits predict x_{p+2};
  // hidden_out (may be null) gets each row's output state. Its keys and
  // values go to the KV cache's layers after the trunk's, at position p (a
  // position the scheduler allocated for the target's row there).
  virtual void forward_mtp(const Batch& batch, const BatchPlacement& placement, KvStore& kv, const float* hidden_in,
                           float* logits, float* hidden_out);
};

// How MLA attention runs (DeepSeek models; others ignore it).
enum class MlaAttention {
  Auto,          // per step, whichever the cost model says is cheaper
  Absorbed,      // attend over the latent cache (attn_k_b folded into the query, attn_v_b into the output)
  Decompressed,  // rebuild per-head keys and values from the latent, then plain multi-head attention
};

struct ModelOptions {
  int64_t max_batch_tokens = 512;
  // The context the model will run at (0: its training context). Phi-3's
  // LongRoPE picks its frequency factors by it, as llama.cpp does.
  int64_t n_ctx = 0;
  bool log_fusion = false;  // print which fused operators are used, at load
  MlaAttention mla = MlaAttention::Auto;
  bool load_mtp = false;  // load the file's multi-token-prediction layers (and cache for them)
  // Set (with load_mtp): the MTP block comes from this file instead, as llama.cpp's converter writes
  // DeepSeek-V4's (`mtp-*.gguf`: the block, the embedding, the head). Must outlive the model.
  const GgufFile* mtp_file = nullptr;
  TensorShard shard;      // this rank's share under tensor parallelism (default: everything)
};

// Picks the architecture from general.architecture. The GgufFile must outlive the model.
// Every tensor of the file must be used by the architecture and every
// metadata key of its namespace read, or loading fails naming the first that is not.
std::unique_ptr<Model> load_model(const GgufFile& file, Backend& backend, const ModelOptions& options);
// The hyperparameters alone (validated; no weights read).
ModelConfig read_model_config(const GgufFile& file, const ModelOptions& options = {});
// "llama, qwen2, ..., deepseek2" (model/family.h has the table)
std::string supported_architectures();

}  // namespace kestrel

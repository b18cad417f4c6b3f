#pragma once
// The operators an architecture file may use. The model code calls only these,
// so a GPU or tensor-parallel backend is a new implementation of this
// interface, not a change to the model math.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/moe_route.h"
#include "kernels/ops.h"
#include "formats/weight.h"

namespace kestrel {

class Operator;
struct Batch;  // model/batch.h

// An activation buffer a backend owns, or a view into one from a float
// offset (`buf + rows * dim`). Model code passes these to operators and
// never reads or writes through them: only a backend resolves one (the CPU
// backend's are host memory; a device backend's are device memory), so the
// model code is the same whichever backend runs it.
class Act {
 public:
  Act() = default;
  Act operator+(int64_t floats) const { return Act(base_, offset_ + floats); }
  explicit operator bool() const { return base_ != nullptr; }
  bool operator==(const Act&) const = default;

 private:
  friend class Backend;
  friend class OpContext;  // a named operator's host kernel (backend/operator.h)
  Act(void* base, int64_t offset) : base_(base), offset_(offset) {}
  void* base_ = nullptr;
  int64_t offset_ = 0;
};

// Where a layer's keys and values are written: the KV store's rows (kv/),
// which the backend fills through write_kv.
struct KvLayerWrite {
  void* k = nullptr;
  void* v = nullptr;  // null: the layer keeps keys only (MLA's latent rows)
  int64_t k_stride = 0, v_stride = 0;  // bytes between consecutive slots
  int64_t k_width = 0, v_width = 0;    // floats per row
  KvRowFormat k_format, v_format;
};

// The query rows of an attention call (AttentionBatch with buffers).
struct AttentionRows {
  int64_t n_tokens = 0;
  Act q;    // [n_tokens][n_head * head_dim]
  Act out;  // [n_tokens][n_head * value_dim()]
  const int32_t* positions = nullptr;
  const int32_t* const* block_tables = nullptr;  // per token: its sequence's table
  const int32_t* horizons = nullptr;  // per token the last position it sees (null: its own; AttentionBatch)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string describe() const = 0;
  virtual int n_threads() const = 0;
  // The model announces which layer the next calls belong to (-1: outside
  // the layers); profilers and tracing backends use it, others ignore it.
  virtual void annotate_layer(int /*layer*/) {}
  // The model announces the step's batch (before the step's first operator), and which of its rows the next
  // calls' rows are (list null: rows [first, first + n); else list[first, first + n)): a backend that treats rows
  // by a per-row property of the batch (LoRA adapters: model/lora_backend.h) reads them; others ignore them.
  virtual void annotate_batch(const Batch& /*b*/) {}
  virtual void annotate_rows(const int64_t* /*list*/, int64_t /*first*/, int64_t /*n*/) {}
  // ...and, inside those, that the next calls' rows are rows picks[0, n) of them (a MoE layer's rows gathered by
  // expert; null: back to the rows announced last).
  virtual void annotate_subrows(const int64_t* /*picks*/, int64_t /*n*/) {}

  // Called once per weight matrix at load, before any matmul with it: a
  // backend may attach a copy in the layout its kernels prefer (repacked
  // rows, device memory). The default uses the weight as stored.
  virtual Weight prepare_weight(Weight w) { return w; }

  // Memory for one layer's KV rows (`bytes`, contents undefined), which this backend's write_kv and attention
  // then use where they run (a device's memory the host can also address). Null, the default: the KV store
  // allocates host memory itself.
  virtual std::shared_ptr<void> kv_memory(int /*layer*/, size_t /*bytes*/, const std::string& /*what*/) {
    return nullptr;
  }

  // ---- Activation memory ----
  // n floats of the backend's memory (zeroed), until release().
  virtual Act alloc(int64_t n);
  virtual void release(Act buffer);
  // Caller-owned host memory as a buffer operators read or write (logits,
  // hidden states): the memory itself on the CPU; read() then brings what
  // operators wrote into it to the host.
  virtual Act host_view(float* p) { return Act(p, 0); }
  virtual Act host_view(const float* p) { return Act(const_cast<float*>(p), 0); }
  // dst[0, n) = src's first n floats, on the host (nothing to do when src is a host_view of dst).
  virtual void read(Act src, float* dst, int64_t n);
  // The buffer's host memory, for transports that move host memory between
  // ranks (MPI under --parallel); valid until the next operator. A device
  // backend would stage it; a backend that cannot refuses.
  virtual float* map(Act a, int64_t /*n*/) { return host(a); }

  // ---- Matrix products ----
  // y[n][w.rows()] = x[n][w.cols()] . W^T
  virtual void matmul(const Weight& w, Act x, int64_t n, Act y) = 0;
  // Fused forms. The defaults run the plain operators one after another; a
  // backend overrides them when it can do better (see Backend::fusions()).
  // ys[i] = x . ws[i]^T for weights that share the input x.
  virtual void matmul_many(const Weight* const* ws, int count, Act x, int64_t n, const Act* ys) {
    for (int i = 0; i < count; i++) matmul(*ws[i], x, n, ys[i]);
  }
  // out = silu(x . gate^T) * (x . up^T); scratch holds n * gate.rows() floats.
  virtual void swiglu(const Weight& gate, const Weight& up, Act x, int64_t n, Act out, Act scratch) {
    matmul(gate, x, n, out);
    matmul(up, x, n, scratch);
    silu_mul(out, scratch, n * gate.rows());
  }
  // out = gelu(x . gate^T) * (x . up^T) (Gemma's gated FFN; ops.h gelu_mul).
  virtual void geglu(const Weight& gate, const Weight& up, Act x, int64_t n, Act out, Act scratch) {
    matmul(gate, x, n, out);
    matmul(up, x, n, scratch);
    gelu_mul(out, scratch, n * gate.rows());
  }
  // The attention input projections: q, k, v = x . W^T (+ bias), then (Qwen3,
  // Gemma 3) an RMSNorm of each head of q and k, then RoPE on q and k.
  // biases[i] and the norms may be null. The default runs the plain operators.
  struct QkvShape {
    int n_head, n_kv_head, head_dim;
    const float* q_norm = nullptr;  // head_dim weights, or null
    const float* k_norm = nullptr;
    float norm_eps = 0.0f;
  };
  virtual void qkv_rope(const Weight* const* wqkv, const float* const* biases, Act x, int64_t n,
                        const int32_t* positions, const RopeParams& rope, const QkvShape& shape, const Act* out) {
    matmul_many(wqkv, 3, x, n, out);
    for (int i = 0; i < 3; i++)
      if (biases[i]) add_bias(out[i], biases[i], n, wqkv[i]->rows());
    if (shape.q_norm) rmsnorm(out[0], shape.q_norm, out[0], n * shape.n_head, shape.head_dim, shape.norm_eps);
    if (shape.k_norm) rmsnorm(out[1], shape.k_norm, out[1], n * shape.n_kv_head, shape.head_dim, shape.norm_eps);
    this->rope(out[0], positions, n, shape.n_head, shape.head_dim, rope);
    this->rope(out[1], positions, n, shape.n_kv_head, shape.head_dim, rope);
  }

  // Per-head products (MLA's attn_k_b / attn_v_b): for each head h and token t,
  //   y[t * y_stride + h * y_head_stride ...] = x[t * x_stride + h * x_head_stride ...] . ws[h]^T
  // (x_head_stride 0: every head reads the same input). The default gathers
  // each head's inputs and runs matmul.
  virtual void matmul_heads(const Weight* ws, int n_heads, Act x, int64_t x_stride, int64_t x_head_stride, int64_t n,
                            Act y, int64_t y_stride, int64_t y_head_stride);

  // Independent SwiGLU FFNs, each with its own input (a MoE layer's active
  // experts): ys[i] = down_i . (silu(gate_i . x_i) * (up_i . x_i)), x_i of
  // ns[i] rows. The default runs them one after another.
  struct FfnRef {
    const Weight* gate;
    const Weight* up;
    const Weight* down;
    float clamp = 0.0f;  // > 0: the clamped SwiGLU (swiglu_clamp) at this limit
    // gpt-oss's experts: biases after each projection (null: none) and, alpha > 0, its SwiGLU (swiglu_oai at
    // limit clamp).
    const float* gate_b = nullptr;
    const float* up_b = nullptr;
    const float* down_b = nullptr;
    float alpha = 0.0f;
    bool gelu = false;  // GeGLU instead of SwiGLU (Gemma 4's experts: ops.h gelu_mul)
    // Plain SwiGLU, no bias: what the fused gate/up kernels run.
    bool plain() const { return clamp <= 0.0f && !gate_b && !up_b && alpha <= 0.0f && !gelu; }
    // After the gate and up projections of `rows` rows (host floats): their biases, then the activation,
    // into gate.
    void activate(float* gate, float* up, int64_t rows) const;
    // After the down projection: its bias.
    void finish(float* y, int64_t rows) const;
  };
  virtual void ffn_many(const FfnRef* ffns, int count, const Act* xs, const int64_t* ns, const Act* ys);

  // DeepSeekMoE routing of n tokens' router logits (kernels/moe_route.h): the
  // chosen experts and their weights come back to the host (the model groups
  // the tokens by expert from them).
  virtual void moe_route(const MoeRouting& r, Act logits, const float* bias, int64_t n, int32_t* ids,
                         float* weights) {
    thread_local std::vector<float> scratch;
    scratch.resize(2 * static_cast<size_t>(r.n_expert));
    kestrel::moe_route(r, host(logits), bias, n, ids, weights, scratch.data());
  }

  // A forward step failed midway (an exception: its requests fail): work a device backend queued for it is
  // dropped, never run with a later step (it would write cache rows the failed requests no longer own).
  virtual void abandon() {}

  // Sampling where the logits are. argmax_rows: ids[i] = argmax (kernels/ops.h's rule: the first of equals) of
  // row i of `rows` rows of n floats; top_k_rows: row i's k best (ops.h top_k) at ids/vals + i * k. The
  // defaults read the rows to the host; a device backend scans them in place (best_on_device), so a step
  // downloads ids (and the top-k's logits) instead of rows of n_vocab floats.
  virtual void argmax_rows(Act x, int64_t rows, int64_t n, int32_t* ids);
  virtual void top_k_rows(Act x, int64_t rows, int64_t n, int k, int32_t* ids, float* vals);
  virtual bool best_on_device() const { return false; }

  // Whether matmul_many/swiglu are fused for these weights (for --log-fusion).
  virtual bool fuses(const Weight& /*a*/, const Weight& /*b*/) const { return false; }

  // ---- Element-wise and row operators ----
  // out[i] = row tokens[i] of the table, as float
  virtual void embed(const Weight& table, const int32_t* tokens, int64_t n, Act out) = 0;
  virtual void rmsnorm(Act x, const float* w, Act y, int64_t n_rows, int64_t dim, float eps) = 0;
  // LayerNorm with weight and bias (ops.h layernorm_rows; b may be null).
  virtual void layernorm(Act x, const float* w, const float* b, Act y, int64_t n_rows, int64_t dim, float eps) {
    layernorm_rows(host(x), w, b, host(y), n_rows, dim, eps);
  }
  virtual void rope(Act x, const int32_t* positions, int64_t n_rows, int n_heads, int head_dim,
                    const RopeParams& p) = 0;
  virtual void silu_mul(Act gate, Act up, int64_t n) = 0;
  virtual void gelu_mul(Act gate, Act up, int64_t n) { kestrel::gelu_mul(host(gate), host(up), n); }
  virtual void scale(Act x, int64_t n, float s) { scale_inplace(host(x), n, s); }
  virtual void softcap(Act x, int64_t n, float cap) { softcap_inplace(host(x), n, cap); }
  // DeepSeek-V4's clamped SwiGLU over n floats, in place in gate (ops.h swiglu_clamp).
  virtual void swiglu_clamp(Act gate, Act up, int64_t n, float limit) {
    kestrel::swiglu_clamp(host(gate), host(up), n, limit);
  }
  virtual void add(Act x, Act y, int64_t n) = 0;
  virtual void add_bias(Act x, const float* bias, int64_t n_rows, int64_t dim) = 0;
  // x[0, n) = value.
  virtual void fill(Act x, int64_t n, float value);
  // dst[r * dst_stride + c] = src[r * src_stride + c] for r < rows, c < cols
  // (a copy of contiguous rows when both strides are cols).
  virtual void copy(Act dst, int64_t dst_stride, Act src, int64_t src_stride, int64_t rows, int64_t cols);
  // dst row i = src row rows[i] (dim floats each); dst may be src when rows[i] >= i.
  virtual void gather_rows(Act dst, Act src, const int64_t* rows, int64_t n, int64_t dim);
  // dst row rows[i] = src row i.
  virtual void scatter_rows(Act dst, Act src, const int64_t* rows, int64_t n, int64_t dim);
  // dst row rows[i] += weights[i] * src row (src_rows ? src_rows[i] : i), in i order, the product rounded
  // before the sum (a MoE layer's weighted sum of its experts, in llama.cpp's order: ggml_mul, then ggml_add
  // rank after rank).
  virtual void scatter_add_rows(Act dst, Act src, const int64_t* rows, const float* weights, int64_t n, int64_t dim,
                                const int64_t* src_rows = nullptr);

  // ---- Named operators (backend/operator.h) ----
  // Every operator beyond this core — a family's own (Gated DeltaNet, hyper-connections, the lightning
  // indexer, ...) — comes through here with its arguments: the default runs its host kernel inline on host
  // buffers; the CPU backend on its threads; a device backend its own kernel where the operator registered
  // one. Wrappers (profiling, forwarding, guarded) wrap this one method for every operator.
  virtual void run(const Operator& op, const void* args);

  // ---- Attention and the KV cache ----
  // Rows k[i] (and v[i]) written to slots[i] of the layer, in its formats (v may be empty when view.v is null).
  virtual void write_kv(const KvLayerWrite& view, const int64_t* slots, int64_t n, Act k, Act v);
  // dst row p = the layer's key row at position p of the sequence with this block table, as floats (k_width each).
  virtual void read_kv_rows(const PagedKvLayerView& view, const int32_t* table, int64_t len, int64_t k_width, Act dst);
  // dst row i = the layer's key row at positions[i] of the sequence with this block table, as floats.
  virtual void gather_kv_rows(const PagedKvLayerView& view, const int32_t* table, const int32_t* positions,
                              int64_t count, int64_t k_width, Act dst);
  virtual void attention(const PagedKvLayerView& kv, const AttentionRows& rows, const AttentionShape& shape) = 0;
  // The same over len positions of float keys and values in buffers (rows k_width / v_width floats apart).
  virtual void attention_dense(Act k, Act v, int64_t k_width, int64_t v_width, int64_t len,
                               const AttentionRows& rows, const AttentionShape& shape);

 protected:
  // A buffer's memory, for backends whose buffers are host memory (the CPU
  // backend, decorators around it) and the defaults above.
  static float* host(Act a) { return static_cast<float*>(a.base_) + a.offset_; }
  static Act as_act(float* p) { return Act(p, 0); }
  // dst row i = the key row at positions[i] (null: at i) of the sequence with this table, for i in [i0, i1).
  static void copy_kv_rows(const PagedKvLayerView& view, const int32_t* table, const int32_t* positions, int64_t i0,
                           int64_t i1, int64_t k_width, float* dst);
  static AttentionBatch host_rows(const AttentionRows& r) {
    return {r.n_tokens, host(r.q), host(r.out), r.positions, r.block_tables, r.horizons};
  }
};

// n floats of a backend's memory, released with this object. Move-only; it
// converts to the Act that model code passes to operators.
class ActBuffer {
 public:
  ActBuffer() = default;
  ActBuffer(Backend& be, int64_t n) : be_(&be), act_(n > 0 ? be.alloc(n) : Act()), n_(n) {}
  ActBuffer(ActBuffer&& o) noexcept : be_(o.be_), act_(o.act_), n_(o.n_) { o.act_ = Act(), o.n_ = 0; }
  ActBuffer& operator=(ActBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      be_ = o.be_, act_ = o.act_, n_ = o.n_;
      o.act_ = Act(), o.n_ = 0;
    }
    return *this;
  }
  ActBuffer(const ActBuffer&) = delete;
  ActBuffer& operator=(const ActBuffer&) = delete;
  ~ActBuffer() { reset(); }
  operator Act() const { return act_; }  // NOLINT: a buffer is passed where its view is
  Act operator+(int64_t floats) const { return act_ + floats; }
  int64_t size() const { return n_; }
  // At least n floats (a new, zeroed buffer when it was smaller; the contents go).
  void ensure(Backend& be, int64_t n) {
    if (n > n_) *this = ActBuffer(be, n);
  }

 private:
  void reset() {
    if (act_) be_->release(act_);
    act_ = Act();
    n_ = 0;
  }
  Backend* be_ = nullptr;
  Act act_;
  int64_t n_ = 0;
};

struct CpuBackendOptions {
  // Repack Q8_0/Q4_0 matrices at load for the int8 kernels that prefer them
  // (kernels/packed_q8.h). Off: the kernels read the file's layout and give
  // logits bit-identical to llama.cpp's.
  bool repack_weights = true;
};

// The CPU backend with n_threads threads and kernels for the probed ISA.
std::unique_ptr<Backend> make_cpu_backend(int n_threads, const CpuBackendOptions& options = {});

}  // namespace kestrel

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

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string describe() const = 0;
  virtual int n_threads() const = 0;
  // The model announces which layer the next calls belong to (-1: outside
  // the layers); profilers and tracing backends use it, others ignore it.
  virtual void annotate_layer(int /*layer*/) {}

  // Called once per weight matrix at load, before any matmul with it: a
  // backend may attach a copy in the layout its kernels prefer (repacked
  // rows, device memory). The default uses the weight as stored.
  virtual Weight prepare_weight(Weight w) { return w; }

  // y[n][w.rows()] = x[n][w.cols()] . W^T
  virtual void matmul(const Weight& w, const float* x, int64_t n, float* y) = 0;
  // Fused forms. The defaults run the plain operators one after another; a
  // backend overrides them when it can do better (see Backend::fusions()).
  // ys[i] = x . ws[i]^T for weights that share the input x.
  virtual void matmul_many(const Weight* const* ws, int count, const float* x, int64_t n, float* const* ys) {
    for (int i = 0; i < count; i++) matmul(*ws[i], x, n, ys[i]);
  }
  // out = silu(x . gate^T) * (x . up^T); scratch holds n * gate.rows() floats.
  virtual void swiglu(const Weight& gate, const Weight& up, const float* x, int64_t n, float* out, float* scratch) {
    matmul(gate, x, n, out);
    matmul(up, x, n, scratch);
    silu_mul(out, scratch, n * gate.rows());
  }
  // out = gelu(x . gate^T) * (x . up^T) (Gemma's gated FFN; ops.h gelu_mul).
  virtual void geglu(const Weight& gate, const Weight& up, const float* x, int64_t n, float* out, float* scratch) {
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
  virtual void qkv_rope(const Weight* const* wqkv, const float* const* biases, const float* x, int64_t n,
                        const int32_t* positions, const RopeParams& rope, const QkvShape& shape, float* const* out) {
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
  virtual void matmul_heads(const Weight* ws, int n_heads, const float* x, int64_t x_stride, int64_t x_head_stride,
                            int64_t n, float* y, int64_t y_stride, int64_t y_head_stride) {
    thread_local std::vector<float> xs, ys;
    for (int h = 0; h < n_heads; h++) {
      const int64_t cols = ws[h].cols(), rows = ws[h].rows();
      xs.resize(static_cast<size_t>(n * cols));
      ys.resize(static_cast<size_t>(n * rows));
      for (int64_t t = 0; t < n; t++)
        std::copy_n(x + t * x_stride + h * x_head_stride, cols, xs.data() + t * cols);
      matmul(ws[h], xs.data(), n, ys.data());
      for (int64_t t = 0; t < n; t++) std::copy_n(ys.data() + t * rows, rows, y + t * y_stride + h * y_head_stride);
    }
  }

  // Independent SwiGLU FFNs, each with its own input (a MoE layer's active
  // experts): ys[i] = down_i . (silu(gate_i . x_i) * (up_i . x_i)), x_i of
  // ns[i] rows. The default runs them one after another.
  struct FfnRef {
    const Weight* gate;
    const Weight* up;
    const Weight* down;
  };
  virtual void ffn_many(const FfnRef* ffns, int count, const float* const* xs, const int64_t* ns, float* const* ys) {
    thread_local std::vector<float> h, h2;
    for (int i = 0; i < count; i++) {
      const auto need = static_cast<size_t>(ns[i] * ffns[i].gate->rows());
      if (h.size() < need) h.resize(need), h2.resize(need);
      swiglu(*ffns[i].gate, *ffns[i].up, xs[i], ns[i], h.data(), h2.data());
      matmul(*ffns[i].down, h.data(), ns[i], ys[i]);
    }
  }

  // DeepSeekMoE routing of n tokens' router logits (kernels/moe_route.h).
  virtual void moe_route(const MoeRouting& r, const float* logits, const float* bias, int64_t n, int32_t* ids,
                         float* weights) {
    thread_local std::vector<float> scratch;
    scratch.resize(2 * static_cast<size_t>(r.n_expert));
    kestrel::moe_route(r, logits, bias, n, ids, weights, scratch.data());
  }

  // Whether matmul_many/swiglu are fused for these weights (for --log-fusion).
  virtual bool fuses(const Weight& /*a*/, const Weight& /*b*/) const { return false; }

  // out[i] = row tokens[i] of the table, as float
  virtual void embed(const Weight& table, const int32_t* tokens, int64_t n, float* out) = 0;
  virtual void rmsnorm(const float* x, const float* w, float* y, int64_t n_rows, int64_t dim, float eps) = 0;
  virtual void rope(float* x, const int32_t* positions, int64_t n_rows, int n_heads, int head_dim,
                    const RopeParams& p) = 0;
  virtual void attention(const PagedKvLayerView& kv, const AttentionBatch& batch, const AttentionShape& shape) = 0;
  virtual void silu_mul(float* gate, const float* up, int64_t n) = 0;
  virtual void gelu_mul(float* gate, const float* up, int64_t n) { kestrel::gelu_mul(gate, up, n); }
  virtual void scale(float* x, int64_t n, float s) { scale_inplace(x, n, s); }
  virtual void softcap(float* x, int64_t n, float cap) { softcap_inplace(x, n, cap); }
  virtual void add(float* x, const float* y, int64_t n) = 0;
  virtual void add_bias(float* x, const float* bias, int64_t n_rows, int64_t dim) = 0;
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

#pragma once
// A backend that passes every operator to another one: the base of
// decorators (profilers, activation recorders, the tests' guarded backend)
// that override only the operators they watch, so none of them re-lists the
// whole interface. Buffers are the inner backend's.
#include <string>
#include <utility>

#include "backend/backend.h"

namespace kestrel {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(Backend& inner) : in_(inner) {}

  std::string describe() const override { return in_.describe(); }
  int n_threads() const override { return in_.n_threads(); }
  void annotate_layer(int layer) override { in_.annotate_layer(layer); }
  void annotate_batch(const Batch& b) override { in_.annotate_batch(b); }
  void annotate_rows(const int64_t* list, int64_t first, int64_t n) override { in_.annotate_rows(list, first, n); }
  void annotate_subrows(const int64_t* picks, int64_t n) override { in_.annotate_subrows(picks, n); }
  Weight prepare_weight(Weight w) override { return fwd().prepare_weight(std::move(w)); }

  std::shared_ptr<void> kv_memory(int layer, size_t bytes, const std::string& what) override {
    return in_.kv_memory(layer, bytes, what);
  }
  Act alloc(int64_t n) override { return fwd().alloc(n); }
  void release(Act buffer) override { fwd().release(buffer); }
  Act host_view(float* p) override { return fwd().host_view(p); }
  Act host_view(const float* p) override { return fwd().host_view(p); }
  void read(Act src, float* dst, int64_t n) override { fwd().read(src, dst, n); }
  float* map(Act a, int64_t n) override { return fwd().map(a, n); }

  void matmul(const Weight& w, Act x, int64_t n, Act y) override { fwd().matmul(w, x, n, y); }
  void matmul_many(const Weight* const* ws, int count, Act x, int64_t n, const Act* ys) override {
    fwd().matmul_many(ws, count, x, n, ys);
  }
  void swiglu(const Weight& g, const Weight& u, Act x, int64_t n, Act out, Act scratch) override {
    fwd().swiglu(g, u, x, n, out, scratch);
  }
  void geglu(const Weight& g, const Weight& u, Act x, int64_t n, Act out, Act scratch) override {
    fwd().geglu(g, u, x, n, out, scratch);
  }
  void qkv_rope(const Weight* const* w, const float* const* b, Act x, int64_t n, const int32_t* pos,
                const RopeParams& rope, const QkvShape& shape, const Act* out) override {
    fwd().qkv_rope(w, b, x, n, pos, rope, shape, out);
  }
  void matmul_heads(const Weight* ws, int n_heads, Act x, int64_t x_stride, int64_t x_head_stride, int64_t n, Act y,
                    int64_t y_stride, int64_t y_head_stride) override {
    fwd().matmul_heads(ws, n_heads, x, x_stride, x_head_stride, n, y, y_stride, y_head_stride);
  }
  void ffn_many(const FfnRef* ffns, int count, const Act* xs, const int64_t* ns, const Act* ys) override {
    fwd().ffn_many(ffns, count, xs, ns, ys);
  }
  void moe_route(const MoeRouting& r, Act logits, const float* bias, int64_t n, int32_t* ids,
                 float* weights) override {
    fwd().moe_route(r, logits, bias, n, ids, weights);
  }
  void argmax_rows(Act x, int64_t rows, int64_t n, int32_t* ids) override { fwd().argmax_rows(x, rows, n, ids); }
  void abandon() override { in_.abandon(); }
  void top_k_rows(Act x, int64_t rows, int64_t n, int k, int32_t* ids, float* vals) override {
    fwd().top_k_rows(x, rows, n, k, ids, vals);
  }
  bool best_on_device() const override { return in_.best_on_device(); }
  bool fuses(const Weight& a, const Weight& b) const override { return in_.fuses(a, b); }

  void embed(const Weight& t, const int32_t* tokens, int64_t n, Act out) override { fwd().embed(t, tokens, n, out); }
  void rmsnorm(Act x, const float* w, Act y, int64_t rows, int64_t dim, float eps) override {
    fwd().rmsnorm(x, w, y, rows, dim, eps);
  }
  void swiglu_clamp(Act gate, Act up, int64_t n, float limit) override { fwd().swiglu_clamp(gate, up, n, limit); }
  void layernorm(Act x, const float* w, const float* b, Act y, int64_t rows, int64_t dim, float eps) override {
    fwd().layernorm(x, w, b, y, rows, dim, eps);
  }
  void rope(Act x, const int32_t* pos, int64_t rows, int heads, int hd, const RopeParams& p) override {
    fwd().rope(x, pos, rows, heads, hd, p);
  }
  void silu_mul(Act g, Act u, int64_t n) override { fwd().silu_mul(g, u, n); }
  void gelu_mul(Act g, Act u, int64_t n) override { fwd().gelu_mul(g, u, n); }
  void scale(Act x, int64_t n, float s) override { fwd().scale(x, n, s); }
  void softcap(Act x, int64_t n, float cap) override { fwd().softcap(x, n, cap); }
  void add(Act x, Act y, int64_t n) override { fwd().add(x, y, n); }
  void add_bias(Act x, const float* b, int64_t rows, int64_t dim) override { fwd().add_bias(x, b, rows, dim); }
  void fill(Act x, int64_t n, float value) override { fwd().fill(x, n, value); }
  void copy(Act dst, int64_t dst_stride, Act src, int64_t src_stride, int64_t rows, int64_t cols) override {
    fwd().copy(dst, dst_stride, src, src_stride, rows, cols);
  }
  void gather_rows(Act dst, Act src, const int64_t* rows, int64_t n, int64_t dim) override {
    fwd().gather_rows(dst, src, rows, n, dim);
  }
  void scatter_rows(Act dst, Act src, const int64_t* rows, int64_t n, int64_t dim) override {
    fwd().scatter_rows(dst, src, rows, n, dim);
  }
  void scatter_add_rows(Act dst, Act src, const int64_t* rows, const float* w, int64_t n, int64_t dim,
                        const int64_t* src_rows = nullptr) override {
    fwd().scatter_add_rows(dst, src, rows, w, n, dim, src_rows);
  }

  void run(const Operator& op, const void* args) override { fwd().run(op, args); }

  void write_kv(const KvLayerWrite& view, const int64_t* slots, int64_t n, Act k, Act v) override {
    fwd().write_kv(view, slots, n, k, v);
  }
  void read_kv_rows(const PagedKvLayerView& view, const int32_t* table, int64_t len, int64_t k_width,
                    Act dst) override {
    fwd().read_kv_rows(view, table, len, k_width, dst);
  }
  void gather_kv_rows(const PagedKvLayerView& view, const int32_t* table, const int32_t* positions, int64_t count,
                      int64_t k_width, Act dst) override {
    fwd().gather_kv_rows(view, table, positions, count, k_width, dst);
  }
  void attention(const PagedKvLayerView& kv, const AttentionRows& rows, const AttentionShape& s) override {
    fwd().attention(kv, rows, s);
  }
  void attention_dense(Act k, Act v, int64_t k_width, int64_t v_width, int64_t len, const AttentionRows& rows,
                       const AttentionShape& s) override {
    fwd().attention_dense(k, v, k_width, v_width, len, rows, s);
  }

 protected:
  // Every forwarded operator goes through here: a backend whose own work must be finished before the inner
  // one runs (a device backend falling back to the CPU for an operator) overrides before_forward.
  virtual void before_forward() {}
  Backend& fwd() {
    before_forward();
    return in_;
  }
  Backend& in_;
};

}  // namespace kestrel

#pragma once
// A backend that passes every operator to another one: the base of
// decorators (activation recorders) that override only the operators they
// watch, so none of them re-lists the whole interface.
#include <string>
#include <utility>

#include "kernels/backend.h"

namespace kestrel {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(Backend& inner) : in_(inner) {}

  std::string describe() const override { return in_.describe(); }
  int n_threads() const override { return in_.n_threads(); }
  void annotate_layer(int layer) override { in_.annotate_layer(layer); }
  Weight prepare_weight(Weight w) override { return in_.prepare_weight(std::move(w)); }
  void matmul(const Weight& w, const float* x, int64_t n, float* y) override { in_.matmul(w, x, n, y); }
  void matmul_many(const Weight* const* ws, int count, const float* x, int64_t n, float* const* ys) override {
    in_.matmul_many(ws, count, x, n, ys);
  }
  void swiglu(const Weight& g, const Weight& u, const float* x, int64_t n, float* out, float* scratch) override {
    in_.swiglu(g, u, x, n, out, scratch);
  }
  void geglu(const Weight& g, const Weight& u, const float* x, int64_t n, float* out, float* scratch) override {
    in_.geglu(g, u, x, n, out, scratch);
  }
  void qkv_rope(const Weight* const* w, const float* const* b, const float* x, int64_t n, const int32_t* pos,
                const RopeParams& rope, const QkvShape& shape, float* const* out) override {
    in_.qkv_rope(w, b, x, n, pos, rope, shape, out);
  }
  void matmul_heads(const Weight* ws, int n_heads, const float* x, int64_t x_stride, int64_t x_head_stride, int64_t n,
                    float* y, int64_t y_stride, int64_t y_head_stride) override {
    in_.matmul_heads(ws, n_heads, x, x_stride, x_head_stride, n, y, y_stride, y_head_stride);
  }
  void ffn_many(const FfnRef* ffns, int count, const float* const* xs, const int64_t* ns, float* const* ys) override {
    in_.ffn_many(ffns, count, xs, ns, ys);
  }
  void moe_route(const MoeRouting& r, const float* logits, const float* bias, int64_t n, int32_t* ids,
                 float* weights) override {
    in_.moe_route(r, logits, bias, n, ids, weights);
  }
  bool fuses(const Weight& a, const Weight& b) const override { return in_.fuses(a, b); }
  void embed(const Weight& t, const int32_t* tokens, int64_t n, float* out) override { in_.embed(t, tokens, n, out); }
  void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t dim, float eps) override {
    in_.rmsnorm(x, w, y, rows, dim, eps);
  }
  void rope(float* x, const int32_t* pos, int64_t rows, int heads, int hd, const RopeParams& p) override {
    in_.rope(x, pos, rows, heads, hd, p);
  }
  void attention(const PagedKvLayerView& kv, const AttentionBatch& b, const AttentionShape& s) override {
    in_.attention(kv, b, s);
  }
  void silu_mul(float* g, const float* u, int64_t n) override { in_.silu_mul(g, u, n); }
  void gelu_mul(float* g, const float* u, int64_t n) override { in_.gelu_mul(g, u, n); }
  void scale(float* x, int64_t n, float s) override { in_.scale(x, n, s); }
  void softcap(float* x, int64_t n, float cap) override { in_.softcap(x, n, cap); }
  void add(float* x, const float* y, int64_t n) override { in_.add(x, y, n); }
  void add_bias(float* x, const float* b, int64_t rows, int64_t dim) override { in_.add_bias(x, b, rows, dim); }

 protected:
  Backend& in_;
};

}  // namespace kestrel

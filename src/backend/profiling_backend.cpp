#include "backend/profiling_backend.h"

#include <fmt/format.h>

#include <cstdlib>
#include <utility>

#include "backend/forwarding_backend.h"
#include "backend/operator.h"

namespace kestrel {
namespace {

// "blk.12.attn_q.weight" -> layer 12, "attn_q"; "output.weight" -> -1,
// "output"; slices of 3-D tensors ("blk.3.ffn_up_exps.weight.17", one
// expert or head) -> their tensor's name, so experts add up in one row.
std::pair<int, std::string> split_weight_name(const std::string& name) {
  std::string base = name;
  if (const auto dot = base.rfind(".weight"); dot != std::string::npos) base.resize(dot);
  if (base.rfind("blk.", 0) == 0) {
    const auto dot = base.find('.', 4);
    if (dot != std::string::npos) return {std::atoi(base.c_str() + 4), base.substr(dot + 1)};
  }
  return {-1, base};
}

class ProfilingBackend final : public ForwardingBackend {
 public:
  ProfilingBackend(Backend& inner, Profiler& p) : ForwardingBackend(inner), p_(p) {}

  std::string describe() const override { return in_.describe() + ", profiling"; }
  void annotate_layer(int layer) override {
    layer_ = layer;
    in_.annotate_layer(layer);
  }

  void matmul(const Weight& w, Act x, int64_t n, Act y) override {
    const auto [layer, op] = split_weight_name(w.name);
    timed("matmul " + op, layer, static_cast<double>(w.nbytes) + 4.0 * n * (w.cols() + w.rows()),
          2.0 * static_cast<double>(n) * w.rows() * w.cols(), [&] { in_.matmul(w, x, n, y); });
  }
  void matmul_many(const Weight* const* ws, int count, Act x, int64_t n, const Act* ys) override {
    std::string op = "matmul";
    int layer = -1;
    double bytes = 0, flops = 0;
    for (int i = 0; i < count; i++) {
      const auto [l, name] = split_weight_name(ws[i]->name);
      op += (i ? "+" : " ") + name;
      layer = l;
      bytes += static_cast<double>(ws[i]->nbytes) + 4.0 * n * ws[i]->rows();
      flops += 2.0 * static_cast<double>(n) * ws[i]->rows() * ws[i]->cols();
    }
    bytes += 4.0 * n * ws[0]->cols();
    timed(op, layer, bytes, flops, [&] { in_.matmul_many(ws, count, x, n, ys); });
  }
  void swiglu(const Weight& gate, const Weight& up, Act x, int64_t n, Act out, Act scratch) override {
    gated(gate, up, n, "swiglu", [&] { in_.swiglu(gate, up, x, n, out, scratch); });
  }
  void geglu(const Weight& gate, const Weight& up, Act x, int64_t n, Act out, Act scratch) override {
    gated(gate, up, n, "geglu", [&] { in_.geglu(gate, up, x, n, out, scratch); });
  }
  void qkv_rope(const Weight* const* w, const float* const* biases, Act x, int64_t n, const int32_t* positions,
                const RopeParams& rope, const QkvShape& shape, const Act* out) override {
    const int layer = split_weight_name(w[0]->name).first;
    double bytes = 4.0 * n * w[0]->cols(), flops = 0;
    for (int i = 0; i < 3; i++) {
      bytes += static_cast<double>(w[i]->nbytes) + 4.0 * n * w[i]->rows();
      flops += 2.0 * static_cast<double>(n) * w[i]->rows() * w[i]->cols();
    }
    timed("matmul attn_q+attn_k+attn_v+rope", layer, bytes, flops,
          [&] { in_.qkv_rope(w, biases, x, n, positions, rope, shape, out); });
  }
  void matmul_heads(const Weight* ws, int n_heads, Act x, int64_t x_stride, int64_t x_head_stride, int64_t n, Act y,
                    int64_t y_stride, int64_t y_head_stride) override {
    const auto [layer, op] = split_weight_name(ws[0].name);
    double bytes = 0, flops = 0;
    for (int h = 0; h < n_heads; h++) {
      bytes += static_cast<double>(ws[h].nbytes) + 4.0 * n * (ws[h].cols() + ws[h].rows());
      flops += 2.0 * static_cast<double>(n) * ws[h].rows() * ws[h].cols();
    }
    timed("matmul " + op + " (per head)", layer, bytes, flops,
          [&] { in_.matmul_heads(ws, n_heads, x, x_stride, x_head_stride, n, y, y_stride, y_head_stride); });
  }
  void ffn_many(const FfnRef* ffns, int count, const Act* xs, const int64_t* ns, const Act* ys) override {
    double bytes = 0, flops = 0;
    int layer = -1;
    for (int i = 0; i < count; i++) {
      layer = split_weight_name(ffns[i].gate->name).first;
      for (const Weight* w : {ffns[i].gate, ffns[i].up, ffns[i].down}) {
        bytes += static_cast<double>(w->nbytes) + 4.0 * ns[i] * (w->cols() + w->rows());
        flops += 2.0 * static_cast<double>(ns[i]) * w->rows() * w->cols();
      }
    }
    timed("matmul ffn experts (gate+up+swiglu+down)", layer, bytes, flops,
          [&] { in_.ffn_many(ffns, count, xs, ns, ys); });
  }
  void moe_route(const MoeRouting& r, Act logits, const float* bias, int64_t n, int32_t* ids,
                 float* weights) override {
    timed("moe_route", layer_, 4.0 * n * r.n_expert, 10.0 * n * r.n_expert,
          [&] { in_.moe_route(r, logits, bias, n, ids, weights); });
    p_.record_expert_load(layer_, r.n_expert, ids, n * r.n_used);
  }
  void argmax_rows(Act x, int64_t rows, int64_t n, int32_t* ids) override {
    timed("argmax", -1, 4.0 * rows * n, 1.0 * rows * n, [&] { in_.argmax_rows(x, rows, n, ids); });
  }
  void top_k_rows(Act x, int64_t rows, int64_t n, int k, int32_t* ids, float* vals) override {
    timed("top_k", -1, 4.0 * rows * n, 1.0 * rows * n, [&] { in_.top_k_rows(x, rows, n, k, ids, vals); });
  }
  void embed(const Weight& t, const int32_t* tokens, int64_t n, Act out) override {
    timed("embed", -1, static_cast<double>(n) * t.row_stride(), 0, [&] { in_.embed(t, tokens, n, out); });
  }
  void rmsnorm(Act x, const float* w, Act y, int64_t rows, int64_t dim, float eps) override {
    timed("rmsnorm", layer_, 8.0 * rows * dim, 4.0 * rows * dim, [&] { in_.rmsnorm(x, w, y, rows, dim, eps); });
  }
  void swiglu_clamp(Act gate, Act up, int64_t n, float limit) override {
    timed("swiglu_clamp", layer_, 12.0 * n, 8.0 * n, [&] { in_.swiglu_clamp(gate, up, n, limit); });
  }
  void run(const Operator& op, const void* args) override {
    const OpCost c = op.cost(args);
    timed(op.name(), layer_, c.bytes, c.flops, [&] { in_.run(op, args); });
  }
  void layernorm(Act x, const float* w, const float* b, Act y, int64_t rows, int64_t dim, float eps) override {
    timed("layernorm", layer_, 8.0 * rows * dim, 7.0 * rows * dim, [&] { in_.layernorm(x, w, b, y, rows, dim, eps); });
  }
  void rope(Act x, const int32_t* pos, int64_t rows, int heads, int hd, const RopeParams& p) override {
    timed("rope", layer_, 8.0 * rows * heads * hd, 3.0 * rows * heads * p.n_rot,
          [&] { in_.rope(x, pos, rows, heads, hd, p); });
  }
  void attention(const PagedKvLayerView& kv, const AttentionRows& b, const AttentionShape& s) override {
    double keys = 0;
    for (int64_t t = 0; t < b.n_tokens; t++) keys += b.positions[t] + 1 - s.first_position(b.positions[t]);
    const double kv_bytes = keys * static_cast<double>(kv.k_stride + kv.v_stride);
    timed("attention", layer_, kv_bytes, 4.0 * keys * s.n_head * s.head_dim, [&] { in_.attention(kv, b, s); });
  }
  void attention_dense(Act k, Act v, int64_t kw, int64_t vw, int64_t len, const AttentionRows& b,
                       const AttentionShape& s) override {
    double keys = 0;
    for (int64_t t = 0; t < b.n_tokens; t++) keys += std::min<int64_t>(len, b.positions[t] + 1);
    timed("attention_dense", layer_, keys * 4.0 * static_cast<double>(kw + vw), 4.0 * keys * s.n_head * s.head_dim,
          [&] { in_.attention_dense(k, v, kw, vw, len, b, s); });
  }
  void silu_mul(Act g, Act u, int64_t n) override {
    timed("silu_mul", layer_, 12.0 * n, 5.0 * n, [&] { in_.silu_mul(g, u, n); });
  }
  void gelu_mul(Act g, Act u, int64_t n) override {
    timed("gelu_mul", layer_, 12.0 * n, 5.0 * n, [&] { in_.gelu_mul(g, u, n); });
  }
  void scale(Act x, int64_t n, float s) override {
    timed("scale", layer_, 8.0 * n, static_cast<double>(n), [&] { in_.scale(x, n, s); });
  }
  void softcap(Act x, int64_t n, float cap) override {
    timed("softcap", layer_, 8.0 * n, 5.0 * n, [&] { in_.softcap(x, n, cap); });
  }
  void add(Act x, Act y, int64_t n) override {
    timed("add", layer_, 12.0 * n, static_cast<double>(n), [&] { in_.add(x, y, n); });
  }
  void add_bias(Act x, const float* b, int64_t rows, int64_t dim) override {
    timed("add_bias", layer_, 8.0 * rows * dim, static_cast<double>(rows * dim),
          [&] { in_.add_bias(x, b, rows, dim); });
  }
  void fill(Act x, int64_t n, float value) override {
    timed("fill", layer_, 4.0 * n, 0, [&] { in_.fill(x, n, value); });
  }
  void copy(Act dst, int64_t ds, Act src, int64_t ss, int64_t rows, int64_t cols) override {
    timed("copy", layer_, 8.0 * rows * cols, 0, [&] { in_.copy(dst, ds, src, ss, rows, cols); });
  }
  void gather_rows(Act dst, Act src, const int64_t* rows, int64_t n, int64_t dim) override {
    timed("gather_rows", layer_, 8.0 * n * dim, 0, [&] { in_.gather_rows(dst, src, rows, n, dim); });
  }
  void scatter_rows(Act dst, Act src, const int64_t* rows, int64_t n, int64_t dim) override {
    timed("scatter_rows", layer_, 8.0 * n * dim, 0, [&] { in_.scatter_rows(dst, src, rows, n, dim); });
  }
  void scatter_add_rows(Act dst, Act src, const int64_t* rows, const float* w, int64_t n, int64_t dim,
                        const int64_t* src_rows = nullptr) override {
    timed("scatter_add_rows", layer_, 12.0 * n * dim, 2.0 * n * dim,
          [&] { in_.scatter_add_rows(dst, src, rows, w, n, dim, src_rows); });
  }
  void read_kv_rows(const PagedKvLayerView& view, const int32_t* table, int64_t len, int64_t k_width,
                    Act dst) override {
    timed("read_kv_rows", layer_, 8.0 * len * k_width, 0, [&] { in_.read_kv_rows(view, table, len, k_width, dst); });
  }
  void gather_kv_rows(const PagedKvLayerView& view, const int32_t* table, const int32_t* positions, int64_t count,
                      int64_t k_width, Act dst) override {
    timed("gather_kv_rows", layer_, 8.0 * count * k_width, 0,
          [&] { in_.gather_kv_rows(view, table, positions, count, k_width, dst); });
  }
  void write_kv(const KvLayerWrite& view, const int64_t* slots, int64_t n, Act k, Act v) override {
    timed("write_kv", layer_, 4.0 * n * (view.k_width + (view.v ? view.v_width : 0)), 0,
          [&] { in_.write_kv(view, slots, n, k, v); });
  }

 private:
  // Gate and up matmuls with the activation in their epilogue.
  template <typename Fn>
  void gated(const Weight& gate, const Weight& up, int64_t n, const char* act, Fn&& fn) {
    const auto [layer, g] = split_weight_name(gate.name);
    const auto [l2, u] = split_weight_name(up.name);
    const double bytes = static_cast<double>(gate.nbytes + up.nbytes) + 4.0 * n * (gate.cols() + gate.rows());
    const double flops = 4.0 * static_cast<double>(n) * gate.rows() * gate.cols() + 5.0 * n * gate.rows();
    timed("matmul " + g + "+" + u + "+" + act, layer, bytes, flops, std::forward<Fn>(fn));
  }
  template <typename Fn>
  void timed(std::string op, int layer, double bytes, double flops, Fn&& fn) {
    const int64_t t0 = p_.now_ns();
    fn();
    p_.record({std::move(op), layer, t0, p_.now_ns() - t0, bytes, flops, {}});
  }

  Profiler& p_;
  int layer_ = -1;
};

}  // namespace

std::unique_ptr<Backend> make_profiling_backend(Backend& inner, Profiler& profiler) {
  return std::make_unique<ProfilingBackend>(inner, profiler);
}

}  // namespace kestrel

// The Backend defaults: host-memory buffers and the plain forms of the
// operators, for backends whose buffers are host memory (a device backend
// overrides them all).
#include "backend/backend.h"

#include <cmath>
#include <cstring>

#include "core/error.h"

namespace kestrel {

Act Backend::alloc(int64_t n) { return as_act(new float[static_cast<size_t>(n)]()); }

void Backend::release(Act buffer) { delete[] host(buffer); }

void Backend::read(Act src, float* dst, int64_t n) {
  const float* p = host(src);
  if (p != dst) std::memcpy(dst, p, static_cast<size_t>(n) * sizeof(float));
}

void Backend::matmul_heads(const Weight* ws, int n_heads, Act x, int64_t x_stride, int64_t x_head_stride, int64_t n,
                           Act y, int64_t y_stride, int64_t y_head_stride) {
  thread_local std::vector<float> xs, ys;
  for (int h = 0; h < n_heads; h++) {
    const int64_t cols = ws[h].cols(), rows = ws[h].rows();
    xs.resize(static_cast<size_t>(n * cols));
    ys.resize(static_cast<size_t>(n * rows));
    copy(as_act(xs.data()), cols, x + h * x_head_stride, x_stride, n, cols);
    matmul(ws[h], as_act(xs.data()), n, as_act(ys.data()));
    copy(y + h * y_head_stride, y_stride, as_act(ys.data()), rows, n, rows);
  }
}

void Backend::ffn_many(const FfnRef* ffns, int count, const Act* xs, const int64_t* ns, const Act* ys) {
  thread_local std::vector<float> h, h2;
  for (int i = 0; i < count; i++) {
    const auto need = static_cast<size_t>(ns[i] * ffns[i].gate->rows());
    if (h.size() < need) h.resize(need), h2.resize(need);
    if (!ffns[i].plain()) {
      matmul(*ffns[i].gate, xs[i], ns[i], as_act(h.data()));
      matmul(*ffns[i].up, xs[i], ns[i], as_act(h2.data()));
      ffns[i].activate(h.data(), h2.data(), ns[i]);
    } else {
      swiglu(*ffns[i].gate, *ffns[i].up, xs[i], ns[i], as_act(h.data()), as_act(h2.data()));
    }
    matmul(*ffns[i].down, as_act(h.data()), ns[i], ys[i]);
    ffns[i].finish(host(ys[i]), ns[i]);
  }
}

void Backend::FfnRef::activate(float* g, float* u, int64_t rows) const {
  const int64_t width = gate->rows(), n = rows * width;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t i = 0; i < width; i++) {
      if (gate_b) g[r * width + i] += gate_b[i];
      if (up_b) u[r * width + i] += up_b[i];
    }
  if (gelu)
    kestrel::gelu_mul(g, u, n);
  else if (alpha > 0.0f)
    kestrel::swiglu_oai(g, u, n, alpha, clamp);
  else if (clamp > 0.0f)
    kestrel::swiglu_clamp(g, u, n, clamp);
  else
    kestrel::silu_mul(g, u, n);
}

void Backend::FfnRef::finish(float* y, int64_t rows) const {
  if (!down_b) return;
  const int64_t dim = down->rows();
  for (int64_t r = 0; r < rows; r++)
    for (int64_t i = 0; i < dim; i++) y[r * dim + i] += down_b[i];
}

void Backend::fill(Act x, int64_t n, float value) { std::fill_n(host(x), n, value); }

void Backend::argmax_rows(Act x, int64_t rows, int64_t n, int32_t* ids) {
  const float* p = map(x, rows * n);
  for (int64_t r = 0; r < rows; r++) ids[r] = argmax(p + r * n, n);
}

void Backend::top_k_rows(Act x, int64_t rows, int64_t n, int k, int32_t* ids, float* vals) {
  const float* p = map(x, rows * n);
  for (int64_t r = 0; r < rows; r++) top_k(p + r * n, n, k, ids + r * k, vals + r * k);
}

void Backend::copy(Act dst, int64_t dst_stride, Act src, int64_t src_stride, int64_t rows, int64_t cols) {
  float* d = host(dst);
  const float* s = host(src);
  if (dst_stride == cols && src_stride == cols) {
    std::memmove(d, s, static_cast<size_t>(rows * cols) * sizeof(float));
    return;
  }
  for (int64_t r = 0; r < rows; r++)
    std::memmove(d + r * dst_stride, s + r * src_stride, static_cast<size_t>(cols) * sizeof(float));
}

void Backend::gather_rows(Act dst, Act src, const int64_t* rows, int64_t n, int64_t dim) {
  float* d = host(dst);
  const float* s = host(src);
  for (int64_t i = 0; i < n; i++)
    if (d + i * dim != s + rows[i] * dim) std::memcpy(d + i * dim, s + rows[i] * dim, dim * sizeof(float));
}

void Backend::scatter_rows(Act dst, Act src, const int64_t* rows, int64_t n, int64_t dim) {
  float* d = host(dst);
  const float* s = host(src);
  for (int64_t i = 0; i < n; i++) std::memcpy(d + rows[i] * dim, s + i * dim, dim * sizeof(float));
}

void Backend::scatter_add_rows(Act dst, Act src, const int64_t* rows, const float* weights, int64_t n, int64_t dim,
                               const int64_t* src_rows) {
  float* d = host(dst);
  const float* s = host(src);
  for (int64_t i = 0; i < n; i++) {
    const float w = weights[i];
    float* o = d + rows[i] * dim;
    const float* y = s + (src_rows ? src_rows[i] : i) * dim;
    // The product rounds on its own, as ggml_mul's (this file is built with -ffp-contract=off: no FMA).
    for (int64_t c = 0; c < dim; c++) o[c] += w * y[c];
  }
}

void Backend::write_kv(const KvLayerWrite& view, const int64_t* slots, int64_t n, Act k, Act v) {
  const float* kp = host(k);
  const float* vp = v ? host(v) : nullptr;
  for (int64_t i = 0; i < n; i++) {
    view.k_format.quantize(kp + i * view.k_width, static_cast<uint8_t*>(view.k) + slots[i] * view.k_stride,
                           view.k_width);
    if (view.v && vp)
      view.v_format.quantize(vp + i * view.v_width, static_cast<uint8_t*>(view.v) + slots[i] * view.v_stride,
                             view.v_width);
  }
}

void Backend::copy_kv_rows(const PagedKvLayerView& view, const int32_t* table, const int32_t* positions, int64_t i0,
                           int64_t i1, int64_t k_width, float* dst) {
  for (int64_t i = i0; i < i1; i++) {
    const int64_t slot = view.slot(table, positions ? positions[i] : static_cast<int32_t>(i));
    float* d = dst + i * k_width;
    const float* row = view.k_format.read(view.k_row(slot), 0, d, k_width);
    if (row != d) std::memcpy(d, row, static_cast<size_t>(k_width) * sizeof(float));
  }
}

void Backend::read_kv_rows(const PagedKvLayerView& view, const int32_t* table, int64_t len, int64_t k_width,
                           Act dst) {
  copy_kv_rows(view, table, nullptr, 0, len, k_width, host(dst));
}

void Backend::gather_kv_rows(const PagedKvLayerView& view, const int32_t* table, const int32_t* positions,
                             int64_t count, int64_t k_width, Act dst) {
  copy_kv_rows(view, table, positions, 0, count, k_width, host(dst));
}

void Backend::attention_dense(Act k, Act v, int64_t k_width, int64_t v_width, int64_t len, const AttentionRows& rows,
                              const AttentionShape& shape) {
  // One block holding every position, which every row's table names.
  static const int32_t kOneBlock = 0;
  thread_local std::vector<const int32_t*> tables;
  tables.assign(static_cast<size_t>(rows.n_tokens), &kOneBlock);
  AttentionRows one = rows;
  one.block_tables = tables.data();
  attention(PagedKvLayerView::f32(host(k), host(v), k_width, v_width, static_cast<int>(len)), one, shape);
}

}  // namespace kestrel

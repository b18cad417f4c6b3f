#include "runtime/precision_check.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <string>

#include "core/block_formats.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/forwarding_backend.h"
#include "runtime/batch.h"

namespace kestrel {
namespace {

enum Probe { kQ, kAttention, kAttnProj, kFfn, kResidual, kLogits, kProbes };

// Forwards everything; copies the probed outputs of the current layer.
class ActivationRecorder final : public ForwardingBackend {
 public:
  explicit ActivationRecorder(Backend& inner) : ForwardingBackend(inner) {}
  std::map<int, std::vector<float>> got[kProbes];  // per probe, per layer (-1: outside the layers)

  void annotate_layer(int layer) override {
    layer_ = layer;
    in_.annotate_layer(layer);
  }
  void matmul(const Weight& w, const float* x, int64_t n, float* y) override {
    in_.matmul(w, x, n, y);
    if (w.name.find("attn_output") != std::string::npos) keep(kAttnProj, y, n * w.rows());
    if (w.name.find("ffn_down") != std::string::npos) keep(kFfn, y, n * w.rows());
    if (layer_ < 0 && w.rows() > 0 && (w.name == "output.weight" || w.name == "token_embd.weight"))
      keep(kLogits, y, n * w.rows());
  }
  void qkv_rope(const Weight* const* w, const float* const* b, const float* x, int64_t n, const int32_t* pos,
                const RopeParams& rope, const QkvShape& shape, float* const* out) override {
    in_.qkv_rope(w, b, x, n, pos, rope, shape, out);
    keep(kQ, out[0], n * w[0]->rows());
  }
  void attention(const PagedKvLayerView& kv, const AttentionBatch& b, const AttentionShape& s) override {
    in_.attention(kv, b, s);
    keep(kAttention, b.out, b.n_tokens * s.n_head * s.value_dim());
  }
  void add(float* x, const float* y, int64_t n) override {
    in_.add(x, y, n);
    keep(kResidual, x, n);  // the layer's last add leaves its output
  }

 private:
  void keep(Probe p, const float* v, int64_t n) { got[p][layer_].assign(v, v + n); }
  int layer_ = -1;
};

// The float64 reference: weights dequantized exactly (to float), everything
// else in double.
class F64Llama {
 public:
  F64Llama(const GgufFile& f, const ModelConfig& c, int n_threads) : f_(f), c_(c), pool_(n_threads) {}

  std::vector<double> x;                          // [n][dim]
  std::vector<std::vector<double>> out[kProbes];  // per probe: per layer

  void run(const std::vector<int32_t>& tokens) {
    const int64_t n = static_cast<int64_t>(tokens.size()), dim = c_.n_embd, hd = c_.head_dim;
    const int64_t q_dim = c_.n_head * hd, kv_dim = c_.n_head_kv * hd;
    x.assign(static_cast<size_t>(n * dim), 0.0);
    std::vector<float> row(static_cast<size_t>(dim));
    const GgufTensorInfo* emb = tensor("token_embd.weight");
    for (int64_t t = 0; t < n; t++) {
      dequantize_row(emb->type, emb->data + tokens[t] * row_bytes(emb->type, dim), row.data(), dim);
      for (int64_t i = 0; i < dim; i++) x[t * dim + i] = row[i];
    }
    for (auto& o : out) o.assign(static_cast<size_t>(c_.n_layer), {});
    for (int l = 0; l < c_.n_layer; l++) {
      const std::string p = fmt::format("blk.{}.", l);
      std::vector<double> xb = rmsnorm(x, vec(p + "attn_norm.weight"), n, dim);
      std::vector<double> q = matmul(p + "attn_q.weight", xb, n), k = matmul(p + "attn_k.weight", xb, n),
                          v = matmul(p + "attn_v.weight", xb, n);
      if (c_.qkv_bias) {
        add_bias(q, vec(p + "attn_q.bias"), n), add_bias(k, vec(p + "attn_k.bias"), n);
        add_bias(v, vec(p + "attn_v.bias"), n);
      }
      rope(q, n, c_.n_head), rope(k, n, c_.n_head_kv);
      out[kQ][l] = q;
      std::vector<double> att(static_cast<size_t>(n * q_dim), 0.0);
      const double scale = c_.attn_scale > 0 ? c_.attn_scale : 1.0 / std::sqrt(static_cast<double>(hd));
      const int group = c_.n_head / c_.n_head_kv;
      std::vector<double> s(static_cast<size_t>(n));
      for (int64_t t = 0; t < n; t++)
        for (int h = 0; h < c_.n_head; h++) {
          const double* qh = q.data() + t * q_dim + h * hd;
          double m = -INFINITY;
          for (int64_t j = 0; j <= t; j++) {
            const double* kj = k.data() + j * kv_dim + (h / group) * hd;
            double d = 0;
            for (int64_t i = 0; i < hd; i++) d += qh[i] * kj[i];
            s[j] = d * scale;
            m = std::max(m, s[j]);
          }
          double sum = 0;
          for (int64_t j = 0; j <= t; j++) sum += (s[j] = std::exp(s[j] - m));
          double* o = att.data() + t * q_dim + h * hd;
          for (int64_t j = 0; j <= t; j++) {
            const double* vj = v.data() + j * kv_dim + (h / group) * hd;
            for (int64_t i = 0; i < hd; i++) o[i] += s[j] / sum * vj[i];
          }
        }
      out[kAttention][l] = att;
      std::vector<double> proj = matmul(p + "attn_output.weight", att, n);
      out[kAttnProj][l] = proj;
      for (size_t i = 0; i < x.size(); i++) x[i] += proj[i];
      xb = rmsnorm(x, vec(p + "ffn_norm.weight"), n, dim);
      std::vector<double> g = matmul(p + "ffn_gate.weight", xb, n), u = matmul(p + "ffn_up.weight", xb, n);
      for (size_t i = 0; i < g.size(); i++) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      std::vector<double> ffn = matmul(p + "ffn_down.weight", g, n);
      out[kFfn][l] = ffn;
      for (size_t i = 0; i < x.size(); i++) x[i] += ffn[i];
      out[kResidual][l] = x;
    }
    const std::vector<double> xn = rmsnorm(x, vec("output_norm.weight"), n, dim);
    out[kLogits].assign(1, matmul(f_.find_tensor("output.weight") ? "output.weight" : "token_embd.weight", xn, n));
  }

 private:
  const GgufTensorInfo* tensor(const std::string& name) const {
    const GgufTensorInfo* t = f_.find_tensor(name);
    if (!t) throw Error(fmt::format("precision-check: tensor '{}' not found", name));
    return t;
  }
  std::vector<double> vec(const std::string& name) const {
    const GgufTensorInfo* t = tensor(name);
    std::vector<float> v(static_cast<size_t>(t->n_elements()));
    dequantize_row(t->type, t->data, v.data(), t->n_elements());
    return {v.begin(), v.end()};
  }
  // y[n][rows] = x[n][cols] . Wᵀ, rows in parallel, each dequantized once.
  std::vector<double> matmul(const std::string& name, const std::vector<double>& x, int64_t n) {
    const GgufTensorInfo* t = tensor(name);
    const int64_t cols = t->ne[0], rows = t->n_elements() / cols;
    const size_t rb = row_bytes(t->type, cols);
    std::vector<double> y(static_cast<size_t>(n * rows));
    pool_.parallel_for(rows, [&](int64_t r0, int64_t r1) {
      std::vector<float> w(static_cast<size_t>(cols));
      for (int64_t r = r0; r < r1; r++) {
        dequantize_row(t->type, t->data + r * rb, w.data(), cols);
        for (int64_t i = 0; i < n; i++) {
          double d = 0;
          for (int64_t c = 0; c < cols; c++) d += w[c] * x[i * cols + c];
          y[i * rows + r] = d;
        }
      }
    });
    return y;
  }
  std::vector<double> rmsnorm(const std::vector<double>& x, const std::vector<double>& w, int64_t n,
                              int64_t dim) const {
    std::vector<double> y(x.size());
    for (int64_t t = 0; t < n; t++) {
      double ss = 0;
      for (int64_t i = 0; i < dim; i++) ss += x[t * dim + i] * x[t * dim + i];
      const double inv = 1.0 / std::sqrt(ss / static_cast<double>(dim) + c_.rms_eps);
      for (int64_t i = 0; i < dim; i++) y[t * dim + i] = x[t * dim + i] * inv * w[i];
    }
    return y;
  }
  void add_bias(std::vector<double>& y, const std::vector<double>& b, int64_t n) const {
    const auto d = static_cast<int64_t>(b.size());
    for (int64_t t = 0; t < n; t++)
      for (int64_t i = 0; i < d; i++) y[t * d + i] += b[i];
  }
  void rope(std::vector<double>& x, int64_t n, int heads) const {
    const RopeParams& p = c_.rope;
    const int hd = c_.head_dim, half = p.n_rot / 2;
    for (int64_t t = 0; t < n; t++)
      for (int i = 0; i < half; i++) {
        const double angle = rope_angle(p, t, i);
        const double co = std::cos(angle) * rope_mscale(p), si = std::sin(angle) * rope_mscale(p);
        for (int h = 0; h < heads; h++) {
          double* v = x.data() + (t * heads + h) * hd;
          const int i0 = p.style == RopeStyle::Adjacent ? 2 * i : i;
          const int i1 = p.style == RopeStyle::Adjacent ? 2 * i + 1 : i + half;
          const double a = v[i0], b = v[i1];
          v[i0] = a * co - b * si;
          v[i1] = a * si + b * co;
        }
      }
  }

 public:
  // ops.cpp's rotation angle and magnitude, in double.
  static double rope_angle(const RopeParams& p, int64_t pos, int i) {
    const double freq = std::pow(static_cast<double>(p.freq_base), -2.0 * i / p.n_rot);
    const double extrapolated = static_cast<double>(pos) * freq;
    double angle = p.freq_scale * extrapolated;
    if (p.ext_factor != 0.0f) {
      const double y = (i - p.corr_low) / std::max(0.001, static_cast<double>(p.corr_high - p.corr_low));
      const double mix = (1.0 - std::min(1.0, std::max(0.0, y))) * p.ext_factor;
      angle = angle * (1.0 - mix) + extrapolated * mix;
    }
    return angle;
  }
  static double rope_mscale(const RopeParams& p) {
    return p.ext_factor != 0.0f ? p.attn_factor * (1.0 + 0.1 * std::log(1.0 / p.freq_scale)) : p.attn_factor;
  }

 private:
  const GgufFile& f_;
  const ModelConfig& c_;
  ThreadPool pool_;
};

double relative_error(const std::vector<float>& got, const std::vector<double>& want) {
  if (got.size() != want.size())
    throw Error(fmt::format("precision-check: compared tensors differ in size ({} vs {})", got.size(), want.size()));
  double e = 0, n = 0;
  for (size_t i = 0; i < got.size(); i++) e += (got[i] - want[i]) * (got[i] - want[i]), n += want[i] * want[i];
  return n > 0 ? std::sqrt(e / n) : std::sqrt(e);
}

}  // namespace

std::unique_ptr<Backend> make_activation_recorder(Backend& inner) {
  return std::make_unique<ActivationRecorder>(inner);
}

PrecisionReport precision_check(Engine& e, const std::vector<int32_t>& tokens) {
  auto* rec = dynamic_cast<ActivationRecorder*>(e.backend.get());
  if (!rec) throw Error("precision-check: the engine was not built with make_activation_recorder");
  const ModelConfig& c = e.model->config();
  if (c.arch != "llama" && c.arch != "qwen2")
    throw Error(fmt::format("precision-check covers llama and qwen2 models, not {}", c.arch));
  const auto n = static_cast<int64_t>(tokens.size());
  if (n < 1 || n > e.model->max_batch_tokens() || n > e.n_ctx)
    throw Error(fmt::format("precision-check: {} tokens; give 1 to {} (one batch within the context)", n,
                            std::min(e.model->max_batch_tokens(), e.n_ctx)));
  Batch b;
  for (int64_t i = 0; i < n; i++) b.add(tokens[i], static_cast<int32_t>(i), 0, true);
  e.kv->remove(0);
  std::vector<float> logits(static_cast<size_t>(n * c.n_vocab));
  e.model->forward(b, *e.kv, logits.data());
  e.kv->remove(0);

  F64Llama ref(*e.file, c, e.backend->n_threads());
  ref.run(tokens);
  PrecisionReport r;
  r.n_tokens = n;
  for (int l = 0; l < c.n_layer; l++) {
    LayerPrecision lp;
    lp.layer = l;
    lp.q_rope = relative_error(rec->got[kQ][l], ref.out[kQ][l]);
    lp.attention = relative_error(rec->got[kAttention][l], ref.out[kAttention][l]);
    lp.attn_proj = relative_error(rec->got[kAttnProj][l], ref.out[kAttnProj][l]);
    lp.ffn = relative_error(rec->got[kFfn][l], ref.out[kFfn][l]);
    lp.residual = relative_error(rec->got[kResidual][l], ref.out[kResidual][l]);
    r.layers.push_back(lp);
  }
  r.logits = relative_error(logits, ref.out[kLogits][0]);
  // RoPE: the float32 rotation at the context's last position against float64.
  r.rope_position = e.n_ctx - 1;
  // Pair i: a unit vector in its first dimension, rotated by the real operator.
  const auto pos = static_cast<int32_t>(r.rope_position);
  for (int i = 0; i < c.rope.n_rot / 2; i++) {
    std::vector<float> head(static_cast<size_t>(c.rope.n_rot), 0.0f);
    const bool adjacent = c.rope.style == RopeStyle::Adjacent;
    const int i0 = adjacent ? 2 * i : i, i1 = adjacent ? 2 * i + 1 : i + c.rope.n_rot / 2;
    head[i0] = 1.0f;
    rope_rows(head.data(), &pos, 1, 1, c.rope.n_rot, c.rope);
    const double angle = F64Llama::rope_angle(c.rope, pos, i), m = F64Llama::rope_mscale(c.rope);
    r.rope_max_error = std::max(
        {r.rope_max_error, std::fabs(head[i0] - std::cos(angle) * m), std::fabs(head[i1] - std::sin(angle) * m)});
  }
  return r;
}

}  // namespace kestrel

#include "measure/f64_reference.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "formats/block_formats.h"
#include "core/error.h"

namespace kestrel {

F64Decoder::F64Decoder(const GgufFile& f, const ModelConfig& c, int64_t n_ctx, int n_threads)
    : f_(f), c_(c), recipe_(family_of(c.arch).recipe), rope_(c.rope), rope_sliding_(c.rope_sliding), pool_(n_threads) {
  const char* name = has("rope_freqs.weight")                ? "rope_freqs.weight"
                     : !has("rope_factors_long.weight")       ? nullptr
                     : n_ctx > c.n_ctx_orig                   ? "rope_factors_long.weight"
                                                              : "rope_factors_short.weight";
  if (name) {
    const Vec v = vec(name);
    factors_.assign(v.begin(), v.end());
  }
  rope_.freq_factors = rope_sliding_.freq_factors = name ? factors_.data() : nullptr;
}

const GgufTensorInfo* F64Decoder::tensor(const std::string& name) const {
  const GgufTensorInfo* t = f_.find_tensor(name);
  if (!t) throw Error(fmt::format("precision-check: tensor '{}' not found", name));
  return t;
}

F64Decoder::Vec F64Decoder::vec(const std::string& name) const {
  const GgufTensorInfo* t = tensor(name);
  std::vector<float> v(static_cast<size_t>(t->n_elements()));
  dequantize_row(t->type, t->data, v.data(), t->n_elements());
  return {v.begin(), v.end()};
}

F64Decoder::Vec F64Decoder::matmul(const std::string& name, const Vec& x, int64_t n, int64_t r0, int64_t count) {
  const GgufTensorInfo* t = tensor(name);
  const int64_t cols = t->ne[0];
  const int64_t rows = count < 0 ? t->n_elements() / cols : count;
  const size_t rb = row_bytes(t->type, cols);
  Vec y(static_cast<size_t>(n * rows));
  pool_.parallel_for(rows, [&](int64_t a, int64_t b) {
    std::vector<float> w(static_cast<size_t>(cols));
    for (int64_t r = a; r < b; r++) {
      dequantize_row(t->type, t->data + (r0 + r) * rb, w.data(), cols);
      for (int64_t i = 0; i < n; i++) {
        double d = 0;
        for (int64_t c = 0; c < cols; c++) d += w[c] * x[i * cols + c];
        y[i * rows + r] = d;
      }
    }
  });
  return y;
}

F64Decoder::Vec F64Decoder::rmsnorm(const Vec& x, const Vec& w, int64_t rows, int64_t dim) const {
  Vec y(x.size());
  for (int64_t t = 0; t < rows; t++) {
    double ss = 0;
    for (int64_t i = 0; i < dim; i++) ss += x[t * dim + i] * x[t * dim + i];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(dim) + c_.rms_eps);
    for (int64_t i = 0; i < dim; i++) y[t * dim + i] = x[t * dim + i] * inv * w[i];
  }
  return y;
}

double F64Decoder::rope_angle(const RopeParams& p, int64_t pos, int i) {
  const double freq = std::pow(static_cast<double>(p.freq_base), -2.0 * i / p.n_rot);
  double extrapolated = static_cast<double>(pos) * freq;
  if (p.freq_factors) extrapolated /= p.freq_factors[i];
  double angle = p.freq_scale * extrapolated;
  if (p.ext_factor != 0.0f) {
    const double y = (i - p.corr_low) / std::max(0.001, static_cast<double>(p.corr_high - p.corr_low));
    const double mix = (1.0 - std::min(1.0, std::max(0.0, y))) * p.ext_factor;
    angle = angle * (1.0 - mix) + extrapolated * mix;
  }
  return angle;
}

double F64Decoder::rope_mscale(const RopeParams& p) {
  return p.ext_factor != 0.0f ? p.attn_factor * (1.0 + 0.1 * std::log(1.0 / p.freq_scale)) : p.attn_factor;
}

void F64Decoder::rope(Vec& x, int64_t n, int heads, const RopeParams& p) const {
  const int hd = c_.head_dim, half = p.n_rot / 2;
  for (int64_t t = 0; t < n; t++)
    for (int i = 0; i < half; i++) {
      const double angle = rope_angle(p, t, i), m = rope_mscale(p);
      const double co = std::cos(angle) * m, si = std::sin(angle) * m;
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

F64Decoder::Vec F64Decoder::attend(const Vec& q, const Vec& k, const Vec& v, int64_t n, int layer) const {
  const int64_t hd = c_.head_dim, q_dim = c_.n_head * hd, kv_dim = c_.n_head_kv * hd;
  const double scale = c_.attn_scale > 0 ? c_.attn_scale : 1.0 / std::sqrt(static_cast<double>(hd));
  const int group = c_.n_head / c_.n_head_kv;
  const int64_t window = c_.window(layer);
  Vec att(static_cast<size_t>(n * q_dim), 0.0), s(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; t++)
    for (int h = 0; h < c_.n_head; h++) {
      const double* qh = q.data() + t * q_dim + h * hd;
      const int64_t first = window > 0 ? std::max<int64_t>(0, t + 1 - window) : 0;
      double m = -INFINITY;
      for (int64_t j = first; j <= t; j++) {
        const double* kj = k.data() + j * kv_dim + (h / group) * hd;
        double d = 0;
        for (int64_t i = 0; i < hd; i++) d += qh[i] * kj[i];
        s[j] = d * scale;
        if (c_.attn_softcap > 0) s[j] = c_.attn_softcap * std::tanh(s[j] / c_.attn_softcap);
        m = std::max(m, s[j]);
      }
      double sum = 0;
      for (int64_t j = first; j <= t; j++) sum += (s[j] = std::exp(s[j] - m));
      double* o = att.data() + t * q_dim + h * hd;
      for (int64_t j = first; j <= t; j++) {
        const double* vj = v.data() + j * kv_dim + (h / group) * hd;
        for (int64_t i = 0; i < hd; i++) o[i] += s[j] / sum * vj[i];
      }
    }
  return att;
}

// down . act(gate . x) * (up . x), the gate and up rows from ffn_gate / ffn_up
// or (fused) the two halves of ffn_up.
F64Decoder::Vec F64Decoder::gated(const std::string& p, const std::string& suffix, const Vec& x, int64_t n,
                                  int64_t width, bool gelu) {
  const std::string up_name = p + "ffn_up" + suffix + ".weight";
  Vec g = recipe_.fused_gate_up ? matmul(up_name, x, n, 0, width) : matmul(p + "ffn_gate" + suffix + ".weight", x, n);
  const Vec u = recipe_.fused_gate_up ? matmul(up_name, x, n, width, width) : matmul(up_name, x, n);
  for (size_t i = 0; i < g.size(); i++) {
    const double a = g[i];
    const double act = gelu ? 0.5 * a * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (a + 0.044715 * a * a * a)))
                            : a / (1.0 + std::exp(-a));
    g[i] = act * u[i];
  }
  return matmul(p + "ffn_down" + suffix + ".weight", g, n);
}

F64Decoder::Vec F64Decoder::ffn(const std::string& p, const Vec& x, int64_t n) {
  if (c_.moe.routing.n_expert > 0) return moe(p, x, n);
  return gated(p, "", x, n, c_.n_ff, recipe_.ffn_act == FfnActivation::Gelu);
}

// Softmax routing (the families here), each token through its chosen experts.
F64Decoder::Vec F64Decoder::moe(const std::string& p, const Vec& x, int64_t n) {
  const MoeConfig& e = c_.moe;
  const MoeRouting& r = e.routing;
  const int64_t dim = c_.n_embd, ff = e.n_ff_expert;
  if (r.gating != ExpertGating::Softmax || r.n_group > 1)
    throw Error("precision-check: only softmax routing without expert groups has a float64 reference");
  const Vec logits = matmul(p + "ffn_gate_inp.weight", x, n);
  Vec out(static_cast<size_t>(n * dim), 0.0);
  for (int64_t t = 0; t < n; t++) {
    const double* lt = logits.data() + t * r.n_expert;
    const double m = *std::max_element(lt, lt + r.n_expert);
    std::vector<double> prob(static_cast<size_t>(r.n_expert));
    double sum = 0;
    for (int i = 0; i < r.n_expert; i++) sum += (prob[i] = std::exp(lt[i] - m));
    for (auto& pr : prob) pr /= sum;
    std::vector<int> order(static_cast<size_t>(r.n_expert));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return prob[a] > prob[b]; });
    double chosen = 0;
    for (int k = 0; k < r.n_used; k++) chosen += prob[order[k]];
    const Vec xt(x.begin() + t * dim, x.begin() + (t + 1) * dim);
    for (int k = 0; k < r.n_used; k++) {
      const int ex = order[k];
      const double w = prob[ex] / (r.normalize ? chosen : 1.0) * r.scale;
      Vec g = matmul(p + "ffn_gate_exps.weight", xt, 1, ex * ff, ff);
      const Vec u = matmul(p + "ffn_up_exps.weight", xt, 1, ex * ff, ff);
      for (int64_t i = 0; i < ff; i++) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      const Vec y = matmul(p + "ffn_down_exps.weight", g, 1, ex * dim, dim);
      for (int64_t d = 0; d < dim; d++) out[t * dim + d] += w * y[d];
    }
  }
  if (e.n_ff_shared > 0) {
    const Vec shared = gated(p, "_shexp", x, n, e.n_ff_shared, false);
    const Vec gate = e.shared_gate ? matmul(p + "ffn_gate_inp_shexp.weight", x, n) : Vec();
    for (int64_t t = 0; t < n; t++) {
      const double g = e.shared_gate ? 1.0 / (1.0 + std::exp(-gate[t])) : 1.0;
      for (int64_t d = 0; d < dim; d++) out[t * dim + d] += g * shared[t * dim + d];
    }
  }
  return out;
}

void F64Decoder::run(const std::vector<int32_t>& tokens) {
  const int64_t n = static_cast<int64_t>(tokens.size()), dim = c_.n_embd, hd = c_.head_dim;
  const int64_t q_dim = c_.n_head * hd, kv_dim = c_.n_head_kv * hd;
  Vec x(static_cast<size_t>(n * dim), 0.0);
  std::vector<float> row(static_cast<size_t>(dim));
  const GgufTensorInfo* emb = tensor("token_embd.weight");
  for (int64_t t = 0; t < n; t++) {
    dequantize_row(emb->type, emb->data + tokens[t] * row_bytes(emb->type, dim), row.data(), dim);
    for (int64_t i = 0; i < dim; i++) x[t * dim + i] = row[i] * static_cast<double>(c_.embed_scale);
  }
  for (auto* v : {&q_rope, &attention, &attn_branch, &ffn_branch, &residual}) v->assign(c_.n_layer, {});
  for (int l = 0; l < c_.n_layer; l++) {
    const std::string p = fmt::format("blk.{}.", l);
    Vec xb = rmsnorm(x, vec(p + "attn_norm.weight"), n, dim);
    Vec q, k, v;
    if (recipe_.fused_qkv) {
      const std::string w = p + "attn_qkv.weight";
      q = matmul(w, xb, n, 0, q_dim), k = matmul(w, xb, n, q_dim, kv_dim), v = matmul(w, xb, n, q_dim + kv_dim, kv_dim);
    } else {
      q = matmul(p + "attn_q.weight", xb, n), k = matmul(p + "attn_k.weight", xb, n), v = matmul(p + "attn_v.weight", xb, n);
    }
    for (auto [y, name] : {std::pair{&q, "attn_q.bias"}, {&k, "attn_k.bias"}, {&v, "attn_v.bias"}}) {
      if (!has(p + name)) continue;
      const Vec b = vec(p + name);
      for (size_t i = 0; i < y->size(); i++) (*y)[i] += b[i % b.size()];
    }
    if (recipe_.qk_norm) {
      q = rmsnorm(q, vec(p + "attn_q_norm.weight"), n * c_.n_head, hd);
      k = rmsnorm(k, vec(p + "attn_k_norm.weight"), n * c_.n_head_kv, hd);
    }
    const RopeParams& rp = c_.is_sliding(l) ? rope_sliding_ : rope_;
    rope(q, n, c_.n_head, rp), rope(k, n, c_.n_head_kv, rp);
    q_rope[l] = q;
    attention[l] = attend(q, k, v, n, l);
    Vec a = matmul(p + "attn_output.weight", attention[l], n);
    if (recipe_.post_norms) a = rmsnorm(a, vec(p + "post_attention_norm.weight"), n, dim);
    attn_branch[l] = a;
    for (size_t i = 0; i < x.size(); i++) x[i] += a[i];
    xb = rmsnorm(x, vec(p + "ffn_norm.weight"), n, dim);
    Vec f = ffn(p, xb, n);
    if (recipe_.post_norms) f = rmsnorm(f, vec(p + "post_ffw_norm.weight"), n, dim);
    ffn_branch[l] = f;
    for (size_t i = 0; i < x.size(); i++) x[i] += f[i];
    residual[l] = x;
  }
  const Vec xn = rmsnorm(x, vec("output_norm.weight"), n, dim);
  logits = matmul(has("output.weight") ? "output.weight" : "token_embd.weight", xn, n);
  if (c_.final_softcap > 0)
    for (auto& z : logits) z = c_.final_softcap * std::tanh(z / c_.final_softcap);
}

}  // namespace kestrel

#include "measure/f64_reference.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "formats/block_formats.h"
#include "core/error.h"
#include "model/arch/gemma4.h"
#include "model/arch/qwen35_layer.h"

namespace kestrel {
namespace {
// The families whose pass is their own (measure/f64_<family>.cpp): their part of the config says.
bool gemma4(const ModelConfig& c) { return family_part_if<Gemma4Config>(c.family) != nullptr; }
bool hybrid(const ModelConfig& c) { return family_part_if<HybridConfig>(c.family) != nullptr; }
}  // namespace

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
  if (gemma4(c)) rope_sliding_.freq_factors = nullptr;  // Gemma 4: rope_freqs are the full layers' alone
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
  if (!lora_.empty()) add_lora(name, x, n, r0, rows, y);
  return y;
}

void F64Decoder::add_lora(const std::string& name, const Vec& x, int64_t n, int64_t r0, int64_t rows, Vec& y) {
  const GgufTensorInfo* t = tensor(name);
  const int64_t cols = t->ne[0];
  // The row's floats of a pair's matrix, as stored.
  const auto row_of = [](const Weight& w, int64_t r, std::vector<float>& out) {
    out.resize(static_cast<size_t>(w.cols()));
    dequantize_row(w.type, w.row(r), out.data(), w.cols());
  };
  for (const auto& [adapter, user] : lora_) {
    const LoraPair* p = adapter->whole(name);  // as stored: a 3-D pair's matrices flattened
    if (!p) continue;
    // A stack of experts: expert r0 / rows-per-expert's A rows and B rows; else A whole, B's rows from r0.
    const int64_t ex = t->ne.size() == 3 ? r0 / t->ne[1] : 0;
    const int64_t a0 = ex * p->rank, local = t->ne.size() == 3 ? ex * t->ne[1] + r0 % t->ne[1] : r0;
    if (p->embedding) throw Error(fmt::format("precision-check: {} as a product with an embedding adapter", name));
    const int64_t r = p->rank;
    const double s = adapter->scale(*p, user);
    std::vector<float> w;
    Vec ax(static_cast<size_t>(n * r), 0.0);
    for (int64_t k = 0; k < r; k++) {
      row_of(p->a, a0 + k, w);
      for (int64_t i = 0; i < n; i++) {
        double d = 0;
        for (int64_t c = 0; c < cols; c++) d += w[c] * x[i * cols + c];
        ax[i * r + k] = d;
      }
    }
    for (int64_t o = 0; o < rows; o++) {
      row_of(p->b, local + o, w);
      for (int64_t i = 0; i < n; i++) {
        double d = 0;
        for (int64_t k = 0; k < r; k++) d += w[k] * ax[i * r + k];
        y[i * rows + o] += s * d;
      }
    }
  }
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

F64Decoder::Vec F64Decoder::layernorm(const Vec& x, const Vec& w, const Vec& b, int64_t rows, int64_t dim,
                                      double eps) const {
  Vec y(x.size());
  for (int64_t t = 0; t < rows; t++) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < dim; i++) mean += x[t * dim + i];
    mean /= static_cast<double>(dim);
    for (int64_t i = 0; i < dim; i++) var += (x[t * dim + i] - mean) * (x[t * dim + i] - mean);
    const double inv = 1.0 / std::sqrt(var / static_cast<double>(dim) + eps);
    for (int64_t i = 0; i < dim; i++) y[t * dim + i] = (x[t * dim + i] - mean) * inv * w[i] + b[i];
  }
  return y;
}

void F64Decoder::rope_at(Vec& x, int64_t n, int heads, int64_t stride, int64_t offset, const RopeParams& p) const {
  const int half = p.n_rot / 2;
  for (int64_t t = 0; t < n; t++)
    for (int i = 0; i < half; i++) {
      const double angle = rope_angle(p, t, i), m = rope_mscale(p);
      const double co = std::cos(angle) * m, si = std::sin(angle) * m;
      for (int h = 0; h < heads; h++) {
        double* v = x.data() + (t * heads + h) * stride + offset;
        const int i0 = p.style == RopeStyle::Adjacent ? 2 * i : i;
        const int i1 = p.style == RopeStyle::Adjacent ? 2 * i + 1 : i + half;
        const double a = v[i0], b = v[i1];
        v[i0] = a * co - b * si;
        v[i1] = a * si + b * co;
      }
    }
}

// y's rows += the bias `name` (one row of it), when the file has it.
void F64Decoder::add_bias(Vec& y, const std::string& name) const {
  if (!has(name)) return;
  const Vec b = vec(name);
  for (size_t i = 0; i < y.size(); i++) y[i] += b[i % b.size()];
}

// The query temperature by position (ModelConfig::query_temp), in double.
void F64Decoder::temper(Vec& q, int64_t n, int64_t width) const {
  const QueryTemperature& qt = c_.query_temp;
  if (!qt.on()) return;
  for (int64_t t = 0; t < n; t++) {
    const double temp = std::log(std::floor((static_cast<double>(t) + qt.offset) / qt.length) + 1.0) * qt.scale + 1.0;
    for (int64_t i = 0; i < width; i++) q[t * width + i] *= temp;
  }
}

F64Decoder::Vec F64Decoder::attend(const Vec& q, const Vec& k, const Vec& v, int64_t n, int layer, int head_dim,
                                   int n_head_kv) const {
  const int64_t hd = head_dim > 0 ? head_dim : c_.head_dim;
  const int nkv = n_head_kv > 0 ? n_head_kv : c_.n_head_kv;
  const int64_t q_dim = c_.n_head * hd, kv_dim = nkv * hd;
  const double scale = c_.attn_scale > 0 ? c_.attn_scale : 1.0 / std::sqrt(static_cast<double>(hd));
  const int group = c_.n_head / nkv;
  const int64_t window = c_.window(layer);
  const int64_t chunk = c_.chunk(layer);
  const Vec sinks = recipe_.attn_sinks ? vec(fmt::format("blk.{}.attn_sinks.weight", layer)) : Vec();
  Vec att(static_cast<size_t>(n * q_dim), 0.0), s(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; t++)
    for (int h = 0; h < c_.n_head; h++) {
      const double* qh = q.data() + t * q_dim + h * hd;
      const int64_t first = chunk > 0 ? t - t % chunk : window > 0 ? std::max<int64_t>(0, t + 1 - window) : 0;
      double m = -INFINITY;
      for (int64_t j = first; j <= t; j++) {
        const double* kj = k.data() + j * kv_dim + (h / group) * hd;
        double d = 0;
        for (int64_t i = 0; i < hd; i++) d += qh[i] * kj[i];
        s[j] = d * scale;
        if (c_.attn_softcap > 0) s[j] = c_.attn_softcap * std::tanh(s[j] / c_.attn_softcap);
        m = std::max(m, s[j]);
      }
      // A sink joins the denominator (gpt-oss): exp(sink - m), m the largest of the scores and the sink.
      if (!sinks.empty()) m = std::max(m, sinks[h]);
      double sum = sinks.empty() ? 0.0 : std::exp(sinks[h] - m);
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
    const double act = gelu ? F64Decoder::gelu(a) : a / (1.0 + std::exp(-a));
    g[i] = act * u[i];
  }
  return matmul(p + "ffn_down" + suffix + ".weight", g, n);
}

F64Decoder::Vec F64Decoder::ffn(const std::string& p, const Vec& x, int64_t n) {
  if (has(p + "ffn_gate_inp.weight")) return moe(p, x, n);  // DeepSeek's leading layers are dense
  return gated(p, "", x, n, c_.n_ff, recipe_.ffn_act == FfnActivation::Gelu);
}

// DeepSeekMoE's routing (kernels/moe_route.h's definition; softmax without groups or bias for the other
// families): scores by softmax or sigmoid, selection by score + bias within the best groups (a group by
// its two best), the chosen scores optionally renormalised, then scaled; each token through its experts.
F64Decoder::Vec F64Decoder::moe(const std::string& p, const Vec& x, int64_t n, const Vec* router_in) {
  const MoeConfig& e = c_.moe;
  const MoeRouting& r = e.routing;
  const int64_t dim = c_.n_embd, ff = e.n_ff_expert;
  Vec logits = matmul(p + "ffn_gate_inp.weight", router_in ? *router_in : x, n);
  // Gemma 4: gate and up as the halves of each expert's ffn_gate_up_exps rows, each expert's output times its
  // ffn_down_exps.scale.
  const bool fused = has(p + "ffn_gate_up_exps.weight");
  const Vec expert_scale = has(p + "ffn_down_exps.scale") ? vec(p + "ffn_down_exps.scale") : Vec();
  add_bias(logits, p + "ffn_gate_inp.bias");  // gpt-oss: on the logits, before everything
  // gpt-oss's experts' biases ([n_expert][width]) and SwiGLU.
  auto expert_bias = [&](const std::string& name) { return has(p + name) ? vec(p + name) : Vec(); };
  const Vec gate_b = expert_bias("ffn_gate_exps.bias"), up_b = expert_bias("ffn_up_exps.bias"),
            down_b = expert_bias("ffn_down_exps.bias");
  const Vec bias = has(p + "exp_probs_b.bias") ? vec(p + "exp_probs_b.bias") : Vec(static_cast<size_t>(r.n_expert), 0.0);
  const int per_group = r.n_expert / r.n_group;
  Vec out(static_cast<size_t>(n * dim), 0.0);
  for (int64_t t = 0; t < n; t++) {
    const double* lt = logits.data() + t * r.n_expert;
    std::vector<double> prob(static_cast<size_t>(r.n_expert)), sel(prob.size());
    if (r.gating == ExpertGating::Sigmoid) {
      for (int i = 0; i < r.n_expert; i++) prob[i] = 1.0 / (1.0 + std::exp(-lt[i]));
    } else if (r.gating == ExpertGating::SoftmaxWeight) {
      for (int i = 0; i < r.n_expert; i++) prob[i] = lt[i];  // the softmax comes over the chosen
    } else {
      const double m = *std::max_element(lt, lt + r.n_expert);
      double sum = 0;
      for (int i = 0; i < r.n_expert; i++) sum += (prob[i] = std::exp(lt[i] - m));
      for (auto& pr : prob) pr /= sum;
    }
    for (int i = 0; i < r.n_expert; i++) sel[i] = r.select_by_logit ? lt[i] : prob[i] + bias[i];
    if (r.n_group > 1) {
      std::vector<double> group_score(static_cast<size_t>(r.n_group));
      for (int g = 0; g < r.n_group; g++) {
        std::vector<double> in(sel.begin() + g * per_group, sel.begin() + (g + 1) * per_group);
        std::sort(in.rbegin(), in.rend());
        group_score[g] = in[0] + (per_group > 1 ? in[1] : 0.0);
      }
      std::vector<int> groups(static_cast<size_t>(r.n_group));
      std::iota(groups.begin(), groups.end(), 0);
      std::stable_sort(groups.begin(), groups.end(), [&](int a, int b) { return group_score[a] > group_score[b]; });
      for (int k = r.n_group_used; k < r.n_group; k++)
        for (int i = 0; i < per_group; i++) sel[groups[k] * per_group + i] = -INFINITY;
    }
    std::vector<int> order(static_cast<size_t>(r.n_expert));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return sel[a] > sel[b]; });
    if (r.gating == ExpertGating::SoftmaxWeight) {
      double m = -INFINITY, sum = 0;
      for (int k = 0; k < r.n_used; k++) m = std::max(m, prob[order[k]]);
      for (int k = 0; k < r.n_used; k++) sum += std::exp(prob[order[k]] - m);
      std::vector<double> soft(prob.size());
      for (int k = 0; k < r.n_used; k++) soft[order[k]] = std::exp(prob[order[k]] - m) / sum;
      prob = soft;
    }
    double chosen = 0;
    for (int k = 0; k < r.n_used; k++) chosen += prob[order[k]];
    const Vec xt(x.begin() + t * dim, x.begin() + (t + 1) * dim);
    for (int k = 0; k < r.n_used; k++) {
      const int ex = order[k];
      double w = prob[ex] / (r.normalize ? chosen : 1.0) * r.scale;
      Vec xe = xt;
      if (e.weight_input) {  // Llama 4: the weight on the expert's input
        for (auto& v : xe) v *= w;
        w = 1.0;
      }
      Vec g = fused ? matmul(p + "ffn_gate_up_exps.weight", xe, 1, ex * 2 * ff, ff)
                    : matmul(p + "ffn_gate_exps.weight", xe, 1, ex * ff, ff);
      Vec u = fused ? matmul(p + "ffn_gate_up_exps.weight", xe, 1, ex * 2 * ff + ff, ff)
                    : matmul(p + "ffn_up_exps.weight", xe, 1, ex * ff, ff);
      for (int64_t i = 0; i < ff; i++) {
        if (!gate_b.empty()) g[i] += gate_b[ex * ff + i];
        if (!up_b.empty()) u[i] += up_b[ex * ff + i];
        if (e.swiglu_alpha > 0) {  // gpt-oss: g * sigmoid(alpha g) * (u + 1), both clamped
          const double lim = e.swiglu_limit, gi = std::min<double>(g[i], lim), ui = std::clamp<double>(u[i], -lim, lim);
          g[i] = gi / (1.0 + std::exp(-e.swiglu_alpha * gi)) * (ui + 1.0);
        } else if (e.expert_act == FfnActivation::Gelu) {
          g[i] = gelu(g[i]) * u[i];
        } else {
          g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
        }
      }
      Vec y = matmul(p + "ffn_down_exps.weight", g, 1, ex * dim, dim);
      if (!down_b.empty())
        for (int64_t d = 0; d < dim; d++) y[d] += down_b[ex * dim + d];
      if (!expert_scale.empty()) w *= expert_scale[ex];
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

// V3.2's lightning indexer: each token's positions (all below top_k; else the top_k by
// sum_h relu(iq_h . ik_j) iw_h, ties to the earlier one), ascending.
std::vector<std::vector<int32_t>> F64Decoder::indexer_select(const std::string& p, const Vec& xb, const Vec& q_a,
                                                             int64_t n) {
  const MlaConfig::Indexer& ix = c_.mla.indexer;
  const int nh = ix.n_head;
  const int64_t hd = ix.head_dim;
  Vec iq = matmul(p + "indexer.attn_q_b.weight", q_a, n);
  Vec ik = layernorm(matmul(p + "indexer.attn_k.weight", xb, n), vec(p + "indexer.k_norm.weight"),
                     vec(p + "indexer.k_norm.bias"), n, hd, 1e-6);
  RopeParams rp = c_.rope;
  rp.style = ix.rope_style;  // V3.2 NeoX halves, GLM-5 adjacent pairs
  rope_at(iq, n, nh, hd, 0, rp);
  rope_at(ik, n, 1, hd, 0, rp);
  const Vec iw = matmul(p + "indexer.proj.weight", xb, n);
  const double w_scale = 1.0 / std::sqrt(static_cast<double>(hd * nh));
  std::vector<std::vector<int32_t>> sel(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; t++) {
    std::vector<int32_t>& s = sel[t];
    s.resize(static_cast<size_t>(t + 1));
    std::iota(s.begin(), s.end(), 0);
    if (t + 1 <= ix.top_k) continue;
    std::vector<double> score(static_cast<size_t>(t + 1), 0.0);
    for (int64_t j = 0; j <= t; j++)
      for (int h = 0; h < nh; h++) {
        double d = 0;
        for (int64_t i = 0; i < hd; i++) d += iq[(t * nh + h) * hd + i] * ik[j * hd + i];
        score[j] += std::max(0.0, d) * iw[t * nh + h] * w_scale;
      }
    std::stable_sort(s.begin(), s.end(), [&](int32_t a, int32_t b) { return score[a] > score[b]; });
    s.resize(static_cast<size_t>(ix.top_k));
    std::sort(s.begin(), s.end());
  }
  return sel;
}

// Multi-head latent attention of layer l, per head with keys and values rebuilt from the latent.
F64Decoder::Vec F64Decoder::mla_attend(int l, const Vec& xb, int64_t n) {
  const MlaConfig& m = c_.mla;
  const std::string p = fmt::format("blk.{}.", l);
  const int nh = c_.n_head;
  const int64_t nope = m.qk_nope, rp = m.qk_rope, hk = nope + rp, lr = m.kv_lora_rank, vh = m.v_head;
  Vec q_a, q;
  if (m.q_lora_rank > 0) {
    q_a = rmsnorm(matmul(p + "attn_q_a.weight", xb, n), vec(p + "attn_q_a_norm.weight"), n, m.q_lora_rank);
    q = matmul(p + "attn_q_b.weight", q_a, n);
  } else {
    q = matmul(p + "attn_q.weight", xb, n);
  }
  const Vec kva = matmul(p + "attn_kv_a_mqa.weight", xb, n);
  Vec lat(static_cast<size_t>(n * lr)), kpe(static_cast<size_t>(n * rp));
  for (int64_t t = 0; t < n; t++) {
    std::copy_n(kva.begin() + t * (lr + rp), lr, lat.begin() + t * lr);
    std::copy_n(kva.begin() + t * (lr + rp) + lr, rp, kpe.begin() + t * rp);
  }
  lat = rmsnorm(lat, vec(p + "attn_kv_a_norm.weight"), n, lr);
  rope_at(q, n, nh, hk, nope, c_.rope);
  rope_at(kpe, n, 1, rp, 0, c_.rope);
  temper(q, n, nh * hk);
  q_rope[l] = q;
  // Per-head up-projections: the split attn_k_b [head][latent][nope] + attn_v_b [head][value][latent], or
  // the fused attn_kv_b [head][nope + value rows][latent].
  const bool split = has(p + "attn_k_b.weight");
  const Vec kb = split ? vec(p + "attn_k_b.weight") : vec(p + "attn_kv_b.weight");
  const Vec vb = split ? vec(p + "attn_v_b.weight") : Vec();
  const auto wk = [&](int h, int64_t r, int64_t d) {
    return split ? kb[(h * lr + r) * nope + d] : kb[(h * (nope + vh) + d) * lr + r];
  };
  const auto wv = [&](int h, int64_t e, int64_t r) {
    return split ? vb[(h * vh + e) * lr + r] : kb[(h * (nope + vh) + nope + e) * lr + r];
  };
  // A shared-indexer layer (GLM-5) attends to the positions the last full layer chose.
  std::vector<std::vector<int32_t>> sel;
  if (m.indexer.n_head > 0 && !m.indexer.shares(l)) {
    sel = indexer_select(p, xb, q_a, n);
    selected[l] = sel;
    last_selection_ = sel;
  } else if (m.indexer.n_head > 0) {
    sel = last_selection_;
  }
  Vec att(static_cast<size_t>(n * nh * vh), 0.0);
  pool_.parallel_for(nh, [&](int64_t h0, int64_t h1) {
    for (auto h = static_cast<int>(h0); h < h1; h++) {
      Vec k(static_cast<size_t>(n * nope), 0.0), v(static_cast<size_t>(n * vh), 0.0);
      for (int64_t j = 0; j < n; j++)
        for (int64_t r = 0; r < lr; r++) {
          const double c = lat[j * lr + r];
          for (int64_t d = 0; d < nope; d++) k[j * nope + d] += wk(h, r, d) * c;
          for (int64_t e = 0; e < vh; e++) v[j * vh + e] += wv(h, e, r) * c;
        }
      for (int64_t t = 0; t < n; t++) {
        const double* qh = q.data() + (t * nh + h) * hk;
        std::vector<int32_t> all;
        if (sel.empty()) {
          all.resize(static_cast<size_t>(t + 1));
          std::iota(all.begin(), all.end(), 0);
        }
        const std::vector<int32_t>& js = sel.empty() ? all : sel[t];
        std::vector<double> s(js.size());
        double mx = -INFINITY;
        for (size_t i = 0; i < js.size(); i++) {
          const int64_t j = js[i];
          double d = 0;
          for (int64_t e = 0; e < nope; e++) d += qh[e] * k[j * nope + e];
          for (int64_t e = 0; e < rp; e++) d += qh[nope + e] * kpe[j * rp + e];
          s[i] = d * c_.attn_scale;
          mx = std::max(mx, s[i]);
        }
        double sum = 0;
        for (auto& e : s) sum += (e = std::exp(e - mx));
        double* o = att.data() + (t * nh + h) * vh;
        for (size_t i = 0; i < js.size(); i++)
          for (int64_t e = 0; e < vh; e++) o[e] += s[i] / sum * v[js[i] * vh + e];
      }
    }
  });
  return att;
}

void F64Decoder::run(const std::vector<int32_t>& tokens) {
  if (recipe_.attention == LayerRecipe::Attention::Compressed) return run_dsv4(tokens);
  if (gemma4(c_)) return run_gemma4(tokens);
  if (hybrid(c_)) return run_hybrid(tokens);
  const int64_t n = static_cast<int64_t>(tokens.size()), dim = c_.n_embd;
  Vec x(static_cast<size_t>(n * dim), 0.0);
  std::vector<float> row(static_cast<size_t>(dim));
  const GgufTensorInfo* emb = tensor("token_embd.weight");
  for (int64_t t = 0; t < n; t++) {
    dequantize_row(emb->type, emb->data + tokens[t] * row_bytes(emb->type, dim), row.data(), dim);
    Vec e(row.begin(), row.end());
    for (const auto& [adapter, user] : lora_)  // an embedding adapter: + s * B . A[token]
      if (const LoraPair* p = adapter->find("token_embd.weight")) {
        std::vector<float> a(static_cast<size_t>(p->rank)), b(static_cast<size_t>(p->rank));
        dequantize_row(p->a.type, p->a.row(tokens[t]), a.data(), p->rank);
        for (int64_t i = 0; i < dim; i++) {
          dequantize_row(p->b.type, p->b.row(i), b.data(), p->rank);
          double d = 0;
          for (int64_t k = 0; k < p->rank; k++) d += static_cast<double>(b[k]) * a[k];
          e[i] += adapter->scale(*p, user) * d;
        }
      }
    for (int64_t i = 0; i < dim; i++) x[t * dim + i] = e[i] * static_cast<double>(c_.embed_scale);
  }
  for (auto* v : {&q_rope, &attention, &attn_branch, &ffn_branch, &residual}) v->assign(c_.n_layer, {});
  selected.assign(c_.n_layer, {});
  for (int l = 0; l < c_.n_layer; l++) {
    const std::string p = fmt::format("blk.{}.", l);
    Vec xb = rmsnorm(x, vec(p + "attn_norm.weight"), n, dim);
    if (recipe_.attention == LayerRecipe::Attention::Mla)
      attention[l] = mla_attend(l, xb, n);
    else
      attention[l] = gqa_attend(l, xb, n);
    Vec a = matmul(p + "attn_output.weight", attention[l], n);
    add_bias(a, p + "attn_output.bias");
    if (recipe_.post_norms) a = rmsnorm(a, vec(p + "post_attention_norm.weight"), n, dim);
    attn_branch[l] = a;
    for (size_t i = 0; i < x.size(); i++) x[i] += a[i];
    xb = rmsnorm(x, vec(p + (recipe_.ffn_norm == LayerRecipe::FfnNorm::PostAttention ? "post_attention_norm.weight"
                                                                                       : "ffn_norm.weight")),
                 n, dim);
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

void F64Decoder::rope_tail(Vec& x, const std::vector<int64_t>& pos, int heads, int64_t stride, const RopeParams& p,
                           bool inverse) {
  const int half = p.n_rot / 2;
  const int64_t off = stride - p.n_rot;
  for (size_t t = 0; t < pos.size(); t++)
    for (int i = 0; i < half; i++) {
      const double angle = rope_angle(p, pos[t], i), m = rope_mscale(p);
      const double co = std::cos(angle) * m, si = (inverse ? -std::sin(angle) : std::sin(angle)) * m;
      for (int h = 0; h < heads; h++) {
        double* v = x.data() + (static_cast<int64_t>(t) * heads + h) * stride + off;
        const double a = v[2 * i], b = v[2 * i + 1];  // adjacent pairs
        v[2 * i] = a * co - b * si;
        v[2 * i + 1] = a * si + b * co;
      }
    }
}

// Grouped-query attention of layer l (before Wo).
F64Decoder::Vec F64Decoder::gqa_attend(int l, const Vec& xb, int64_t n) {
  const std::string p = fmt::format("blk.{}.", l);
  const int64_t hd = c_.head_dim, q_dim = c_.n_head * hd, kv_dim = c_.n_head_kv * hd;
  Vec q, k, v;
  if (recipe_.fused_qkv) {
    const std::string w = p + "attn_qkv.weight";
    q = matmul(w, xb, n, 0, q_dim), k = matmul(w, xb, n, q_dim, kv_dim), v = matmul(w, xb, n, q_dim + kv_dim, kv_dim);
  } else {
    q = matmul(p + "attn_q.weight", xb, n), k = matmul(p + "attn_k.weight", xb, n), v = matmul(p + "attn_v.weight", xb, n);
  }
  for (auto [y, name] : {std::pair{&q, "attn_q.bias"}, {&k, "attn_k.bias"}, {&v, "attn_v.bias"}}) add_bias(*y, p + name);
  if (recipe_.qk_norm || has(p + "attn_q_norm.weight")) {  // glm4moe: where the file has them
    q = rmsnorm(q, vec(p + "attn_q_norm.weight"), n * c_.n_head, hd);
    k = rmsnorm(k, vec(p + "attn_k_norm.weight"), n * c_.n_head_kv, hd);
  }
  const RopeParams& rp = c_.is_sliding(l) ? rope_sliding_ : rope_;
  rope(q, n, c_.n_head, rp), rope(k, n, c_.n_head_kv, rp);
  if (c_.query_temp.on_layer(rp)) temper(q, n, c_.n_head * hd);
  if (c_.rope_qk_norm && rp.n_rot > 0) {  // Llama 4: weightless, after RoPE
    const Vec ones(static_cast<size_t>(hd), 1.0);
    q = rmsnorm(q, ones, n * c_.n_head, hd);
    k = rmsnorm(k, ones, n * c_.n_head_kv, hd);
  }
  q_rope[l] = q;
  return attend(q, k, v, n, l);
}

}  // namespace kestrel

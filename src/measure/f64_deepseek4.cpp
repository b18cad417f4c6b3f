// DeepSeek-V4's float64 pass (model/arch/deepseek4.cpp has the math; measure/f64_reference.h the decoder):
// its hyper-connected streams, its compressed attention and its clamped experts, in double.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "formats/block_formats.h"
#include "measure/f64_reference.h"
#include "model/arch/deepseek4.h"

namespace kestrel {

namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// One token's hyper-connection weights from its mix logits (ops.h hyper_mix's definition, in double).
void dsv4_mix(const double* m, int hc, const std::vector<double>& scale, const std::vector<double>& base, double eps,
              int iters, double* pre, double* post, double* comb) {
  for (int i = 0; i < hc; i++) pre[i] = sigmoid(m[i] * scale[0] + base[i]) + eps;
  if (!post) return;
  for (int i = 0; i < hc; i++) post[i] = 2.0 * sigmoid(m[hc + i] * scale[1] + base[hc + i]);
  for (int src = 0; src < hc; src++) {
    double mx = -INFINITY, sum = 0;
    for (int dst = 0; dst < hc; dst++) mx = std::max(mx, m[2 * hc + dst + src * hc] * scale[2] + base[2 * hc + dst + src * hc]);
    for (int dst = 0; dst < hc; dst++)
      sum += comb[dst + src * hc] = std::exp(m[2 * hc + dst + src * hc] * scale[2] + base[2 * hc + dst + src * hc] - mx);
    for (int dst = 0; dst < hc; dst++) comb[dst + src * hc] = comb[dst + src * hc] / sum + eps;
  }
  // Line a of comb (entries `along` apart, lines `across` apart) divided by its sum + eps.
  const auto normalise = [&](int across, int along) {
    for (int a = 0; a < hc; a++) {
      double sum = eps;
      for (int b = 0; b < hc; b++) sum += comb[a * across + b * along];
      for (int b = 0; b < hc; b++) comb[a * across + b * along] /= sum;
    }
  };
  for (int it = 0; it < iters; it++) {
    if (it > 0) normalise(hc, 1);  // each src's weights over dst
    normalise(1, hc);              // each dst's weights over src
  }
}

}  // namespace

// DeepSeek-V4's attention of layer l over the normed rows xn: window + compressed keys, sinks, the rotation
// turned back, the grouped output (returns what the branch adds, n rows of n_embd; attention[l] keeps the
// per-head output before it).
F64Decoder::Vec F64Decoder::dsv4_attend(int l, const Vec& xn, int64_t n) {
  const Dsv4Config& v = dsv4_config(c_);
  const std::string p = fmt::format("blk.{}.", l);
  const int nh = c_.n_head, ratio = v.ratios[l];
  const int64_t d = c_.head_dim, di = v.idx_dim;
  const RopeParams& rope = ratio > 0 ? v.rope_compress : c_.rope;
  std::vector<int64_t> pos(static_cast<size_t>(n));
  std::iota(pos.begin(), pos.end(), 0);
  const Vec qr = rmsnorm(matmul(p + "attn_q_a.weight", xn, n), vec(p + "attn_q_a_norm.weight"), n, v.q_lora);
  Vec q = rmsnorm(matmul(p + "attn_q_b.weight", qr, n), Vec(static_cast<size_t>(d), 1.0), n * nh, d);
  rope_tail(q, pos, nh, d, rope);
  Vec kv = rmsnorm(matmul(p + "attn_kv.weight", xn, n), vec(p + "attn_kv_a_norm.weight"), n, d);
  rope_tail(kv, pos, 1, d, rope);
  // The completed blocks' keys (and the indexer's).
  const int64_t nb = ratio > 0 ? n / ratio : 0;
  Vec comp, icomp;
  auto compress = [&](const std::string& kv_w, const std::string& gate_w, const std::string& ape_w,
                      const std::string& norm_w, int64_t width) {
    const bool overlap = ratio == 4;
    const int64_t sw = (overlap ? 2 : 1) * width;
    const Vec skv = matmul(kv_w, xn, n);
    Vec ssc = matmul(gate_w, xn, n);
    const Vec ape = vec(ape_w);
    for (int64_t t = 0; t < n; t++)
      for (int64_t j = 0; j < sw; j++) ssc[t * sw + j] += ape[(t % ratio) * sw + j];
    Vec out(static_cast<size_t>(nb * width));
    std::vector<int64_t> starts;
    for (int64_t b = 0; b < nb; b++) {
      starts.push_back(b * ratio);
      for (int64_t j = 0; j < width; j++) {
        // (position, which half of its state) of the block's entries
        std::vector<std::pair<int64_t, int64_t>> e;
        if (overlap && b > 0)
          for (int64_t i = 0; i < ratio; i++) e.push_back({(b - 1) * ratio + i, 0});
        for (int64_t i = 0; i < ratio; i++) e.push_back({b * ratio + i, overlap ? width : 0});
        double mx = -INFINITY, sum = 0, acc = 0;
        for (auto [t, h] : e) mx = std::max(mx, ssc[t * sw + h + j]);
        for (auto [t, h] : e) sum += std::exp(ssc[t * sw + h + j] - mx);
        for (auto [t, h] : e) acc += std::exp(ssc[t * sw + h + j] - mx) / sum * skv[t * sw + h + j];
        out[b * width + j] = acc;
      }
    }
    out = rmsnorm(out, vec(norm_w), nb, width);
    rope_tail(out, starts, 1, width, v.rope_compress);
    return out;
  };
  if (nb > 0) {
    comp = compress(p + "attn_compressor_kv.weight", p + "attn_compressor_gate.weight", p + "attn_compressor_ape.weight",
                    p + "attn_compressor_norm.weight", d);
    if (ratio == 4)
      icomp = compress(p + "indexer_compressor_kv.weight", p + "indexer_compressor_gate.weight",
                       p + "indexer_compressor_ape.weight", p + "indexer_compressor_norm.weight", di);
  }
  // Each token's compressed keys: every completed block (128), or its indexer's top_k of them (4).
  std::vector<std::vector<int64_t>> blocks(static_cast<size_t>(n));
  if (ratio == 4) {
    Vec iq = matmul(p + "indexer.attn_q_b.weight", qr, n);
    rope_tail(iq, pos, v.idx_heads, di, v.rope_compress);
    const Vec iw = matmul(p + "indexer.proj.weight", xn, n);
    const double w_scale = 1.0 / std::sqrt(static_cast<double>(di * v.idx_heads));
    for (int64_t t = 0; t < n; t++) {
      const int64_t vis = (t + 1) / ratio;
      if (vis == 0) {
        selected[l].emplace_back();
        continue;
      }
      std::vector<double> score(static_cast<size_t>(vis), 0.0);
      for (int64_t b = 0; b < vis; b++)
        for (int h = 0; h < v.idx_heads; h++) {
          double dot = 0;
          for (int64_t i = 0; i < di; i++) dot += iq[(t * v.idx_heads + h) * di + i] * icomp[b * di + i];
          score[b] += std::max(0.0, dot) * iw[t * v.idx_heads + h] * w_scale;
        }
      std::vector<int32_t> order(static_cast<size_t>(vis));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return score[a] > score[b]; });
      if (vis > v.idx_top_k) order.resize(static_cast<size_t>(v.idx_top_k));
      std::sort(order.begin(), order.end());
      selected[l].push_back(order);
      blocks[t].assign(order.begin(), order.end());
    }
  } else if (ratio > 0) {
    for (int64_t t = 0; t < n; t++)
      for (int64_t b = 0; b < (t + 1) / ratio; b++) blocks[t].push_back(b);
  }
  const Vec sinks = vec(p + "attn_sinks.weight");
  Vec att(static_cast<size_t>(n * nh * d), 0.0);
  pool_.parallel_for(n, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; t++) {
      std::vector<const double*> keys;
      for (int64_t j = std::max<int64_t>(0, t + 1 - v.window); j <= t; j++) keys.push_back(kv.data() + j * d);
      for (int64_t b : blocks[t]) keys.push_back(comp.data() + b * d);
      for (int h = 0; h < nh; h++) {
        const double* qh = q.data() + (t * nh + h) * d;
        std::vector<double> s(keys.size());
        double mx = -INFINITY;
        for (size_t k = 0; k < keys.size(); k++) {
          double dot = 0;
          for (int64_t i = 0; i < d; i++) dot += qh[i] * keys[k][i];
          s[k] = dot * c_.attn_scale;
          mx = std::max(mx, s[k]);
        }
        double sum = std::exp(sinks[h] - mx);
        for (auto& e : s) sum += (e = std::exp(e - mx));
        double* o = att.data() + (t * nh + h) * d;
        for (size_t k = 0; k < keys.size(); k++)
          for (int64_t i = 0; i < d; i++) o[i] += s[k] / sum * keys[k][i];
      }
    }
  });
  rope_tail(att, pos, nh, d, rope, true);
  attention[l] = att;
  const int64_t gi = nh * d / v.o_groups;
  Vec oa(static_cast<size_t>(n * v.o_groups * v.o_lora));
  for (int g = 0; g < v.o_groups; g++) {
    Vec in(static_cast<size_t>(n * gi));
    for (int64_t t = 0; t < n; t++) std::copy_n(att.begin() + t * nh * d + g * gi, gi, in.begin() + t * gi);
    const Vec out = matmul(p + "attn_output_a.weight", in, n, g * v.o_lora, v.o_lora);
    for (int64_t t = 0; t < n; t++)
      std::copy_n(out.begin() + t * v.o_lora, v.o_lora, oa.begin() + t * v.o_groups * v.o_lora + g * v.o_lora);
  }
  return matmul(p + "attn_output_b.weight", oa, n);
}

// DeepSeek-V4's experts: sqrt(softplus) scores, chosen by score + bias or (hash layers) by the token's row of
// tid2eid, renormalised and scaled; SwiGLU clamped in routed and shared experts.
F64Decoder::Vec F64Decoder::dsv4_moe(int l, const Vec& x, const std::vector<int32_t>& tokens, int64_t n) {
  const Dsv4Config& v = dsv4_config(c_);
  const MoeRouting& r = c_.moe.routing;
  const std::string p = fmt::format("blk.{}.", l);
  const int64_t dim = c_.n_embd, ff = c_.moe.n_ff_expert;
  const Vec logits = matmul(p + "ffn_gate_inp.weight", x, n);
  const bool hashed = l < v.hash_layers;
  const Vec bias = hashed ? Vec() : vec(p + "exp_probs_b.bias");
  const int32_t* table = hashed ? reinterpret_cast<const int32_t*>(tensor(p + "ffn_gate_tid2eid.weight")->data) : nullptr;
  auto swiglu = [](Vec& g, const Vec& u, double limit) {
    for (size_t i = 0; i < g.size(); i++) {
      const double a = limit > 0 ? std::min(g[i], limit) : g[i];
      const double b = limit > 0 ? std::clamp(u[i], -limit, limit) : u[i];
      g[i] = a / (1.0 + std::exp(-a)) * b;
    }
  };
  Vec out(static_cast<size_t>(n * dim), 0.0);
  for (int64_t t = 0; t < n; t++) {
    std::vector<double> prob(static_cast<size_t>(r.n_expert));
    for (int e = 0; e < r.n_expert; e++) {
      const double z = logits[t * r.n_expert + e];
      prob[e] = std::sqrt(z > 20 ? z : std::log1p(std::exp(z)));
    }
    std::vector<int> chosen;
    if (hashed) {
      for (int k = 0; k < r.n_used; k++) chosen.push_back(table[static_cast<int64_t>(tokens[t]) * r.n_used + k]);
    } else {
      std::vector<int> order(static_cast<size_t>(r.n_expert));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return prob[a] + bias[a] > prob[b] + bias[b]; });
      chosen.assign(order.begin(), order.begin() + r.n_used);
    }
    double total = 0;
    for (int e : chosen) total += prob[e];
    const Vec xt(x.begin() + t * dim, x.begin() + (t + 1) * dim);
    for (int e : chosen) {
      const double w = prob[e] / (r.normalize ? total : 1.0) * r.scale;
      Vec g = matmul(p + "ffn_gate_exps.weight", xt, 1, e * ff, ff);
      swiglu(g, matmul(p + "ffn_up_exps.weight", xt, 1, e * ff, ff), v.clamp_exp[l]);
      const Vec y = matmul(p + "ffn_down_exps.weight", g, 1, e * dim, dim);
      for (int64_t i = 0; i < dim; i++) out[t * dim + i] += w * y[i];
    }
  }
  if (c_.moe.n_ff_shared > 0) {
    Vec g = matmul(p + "ffn_gate_shexp.weight", x, n);
    swiglu(g, matmul(p + "ffn_up_shexp.weight", x, n), v.clamp_shexp[l]);
    const Vec y = matmul(p + "ffn_down_shexp.weight", g, n);
    for (size_t i = 0; i < out.size(); i++) out[i] += y[i];
  }
  return out;
}

void F64Decoder::run_dsv4(const std::vector<int32_t>& tokens) {
  const Dsv4Config& v = dsv4_config(c_);
  const int64_t n = static_cast<int64_t>(tokens.size()), dim = c_.n_embd, hc = v.hc, sd = hc * dim;
  const int64_t nm = (2 + hc) * hc;
  Vec x(static_cast<size_t>(n * sd));
  std::vector<float> row(static_cast<size_t>(dim));
  const GgufTensorInfo* emb = tensor("token_embd.weight");
  for (int64_t t = 0; t < n; t++) {
    dequantize_row(emb->type, emb->data + tokens[t] * row_bytes(emb->type, dim), row.data(), dim);
    for (int64_t s = 0; s < hc; s++)
      for (int64_t i = 0; i < dim; i++) x[t * sd + s * dim + i] = row[i];
  }
  for (auto* vv : {&q_rope, &attention, &attn_branch, &ffn_branch, &residual}) vv->assign(c_.n_layer, {});
  selected.assign(c_.n_layer, {});
  const Vec ones(static_cast<size_t>(sd), 1.0);
  std::vector<double> post(static_cast<size_t>(n * hc)), comb(static_cast<size_t>(n * hc * hc));
  // The branch's normed input; post and comb kept for the spread that follows.
  auto branch_in = [&](const std::string& hp, const std::string& norm) {
    const Vec m = matmul(hp + "_fn.weight", rmsnorm(x, ones, n, sd), n);
    const Vec base = vec(hp + "_base.weight"), scale = vec(hp + "_scale.weight");
    Vec y(static_cast<size_t>(n * dim), 0.0);
    for (int64_t t = 0; t < n; t++) {
      std::vector<double> pre(static_cast<size_t>(hc));
      dsv4_mix(m.data() + t * nm, static_cast<int>(hc), scale, base, v.hc_eps, v.sinkhorn_iters, pre.data(),
               post.data() + t * hc, comb.data() + t * hc * hc);
      for (int64_t s = 0; s < hc; s++)
        for (int64_t i = 0; i < dim; i++) y[t * dim + i] += pre[s] * x[t * sd + s * dim + i];
    }
    return rmsnorm(y, vec(norm), n, dim);
  };
  auto spread = [&](const Vec& y) {
    Vec nx(x.size());
    for (int64_t t = 0; t < n; t++)
      for (int64_t dst = 0; dst < hc; dst++)
        for (int64_t i = 0; i < dim; i++) {
          double a = y[t * dim + i] * post[t * hc + dst];
          for (int64_t src = 0; src < hc; src++) a += comb[t * hc * hc + dst + src * hc] * x[t * sd + src * dim + i];
          nx[t * sd + dst * dim + i] = a;
        }
    x = std::move(nx);
  };
  for (int l = 0; l < c_.n_layer; l++) {
    const std::string p = fmt::format("blk.{}.", l);
    attn_branch[l] = dsv4_attend(l, branch_in(p + "hc_attn", p + "attn_norm.weight"), n);
    spread(attn_branch[l]);
    ffn_branch[l] = dsv4_moe(l, branch_in(p + "hc_ffn", p + "ffn_norm.weight"), tokens, n);
    spread(ffn_branch[l]);
    residual[l] = x;
  }
  const Vec m = matmul("output_hc_fn.weight", rmsnorm(x, ones, n, sd), n);
  const Vec base = vec("output_hc_base.weight"), scale = vec("output_hc_scale.weight");
  Vec y(static_cast<size_t>(n * dim), 0.0);
  for (int64_t t = 0; t < n; t++) {
    std::vector<double> pre(static_cast<size_t>(hc));
    dsv4_mix(m.data() + t * hc, static_cast<int>(hc), scale, base, v.hc_eps, 0, pre.data(), nullptr, nullptr);
    for (int64_t s = 0; s < hc; s++)
      for (int64_t i = 0; i < dim; i++) y[t * dim + i] += pre[s] * x[t * sd + s * dim + i];
  }
  logits = matmul("output.weight", rmsnorm(y, vec("output_norm.weight"), n, dim), n);
}

}  // namespace kestrel

// The linear-attention hybrids' float64 pass (model/arch/qwen35_layer.h has the math; measure/f64_reference.h
// the decoder): Gated DeltaNet blocks from their definition, gated attention blocks, the FFN.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "formats/block_formats.h"
#include "measure/f64_reference.h"
#include "model/arch/qwen35_layer.h"

namespace kestrel {

// A gated attention block's branch (the hybrids' full-attention blocks).
F64Decoder::Vec F64Decoder::gated_attend(int l, const Vec& xb, int64_t n) {
  const std::string p = fmt::format("blk.{}.", l);
  const int hd = c_.head_dim, nh = c_.n_head, nkv = c_.n_head_kv;
  const Vec qg = matmul(p + "attn_q.weight", xb, n);  // per head: its query, then its gate
  Vec q(static_cast<size_t>(n * nh * hd)), gate(q.size());
  for (int64_t t = 0; t < n; t++)
    for (int h = 0; h < nh; h++)
      for (int i = 0; i < hd; i++) {
        q[(t * nh + h) * hd + i] = qg[(t * nh + h) * 2 * hd + i];
        gate[(t * nh + h) * hd + i] = qg[(t * nh + h) * 2 * hd + hd + i];
      }
  q = rmsnorm(q, vec(p + "attn_q_norm.weight"), n * nh, hd);
  Vec k = rmsnorm(matmul(p + "attn_k.weight", xb, n), vec(p + "attn_k_norm.weight"), n * nkv, hd);
  rope_at(q, n, nh, hd, 0, rope_);
  rope_at(k, n, nkv, hd, 0, rope_);
  q_rope[l] = q;
  attention[l] = attend(q, k, matmul(p + "attn_v.weight", xb, n), n, l, hd, nkv);
  Vec o = attention[l];
  for (size_t i = 0; i < o.size(); i++) o[i] /= 1.0 + std::exp(-gate[i]);
  return matmul(p + "attn_output.weight", o, n);
}

// The Gated DeltaNet as its definition states it (S[i][j]: key i, value j), from zero state.
F64Decoder::Vec F64Decoder::delta_net(int l, const Vec& xb, int64_t n) {
  const std::string p = fmt::format("blk.{}.", l);
  const GdnShape& g = hybrid_config(c_).gdn;
  const int64_t ch = g.channels(), S = g.head_dim, hv = g.n_v_heads, vd = g.value_dim(), taps = g.d_conv;
  const Vec raw = matmul(p + "attn_qkv.weight", xb, n), z = matmul(p + "attn_gate.weight", xb, n);
  Vec beta(static_cast<size_t>(n * hv)), alpha(beta.size());
  if (has(p + "ssm_ba.weight")) {  // per key head: its value heads' beta, then their alpha
    const Vec ba = matmul(p + "ssm_ba.weight", xb, n);
    const int64_t per = hv / g.n_k_heads;
    for (int64_t t = 0; t < n; t++)
      for (int64_t h = 0; h < hv; h++) {
        beta[t * hv + h] = ba[t * 2 * hv + (h / per) * 2 * per + h % per];
        alpha[t * hv + h] = ba[t * 2 * hv + (h / per) * 2 * per + per + h % per];
      }
  } else {
    beta = matmul(p + "ssm_beta.weight", xb, n);
    alpha = matmul(p + "ssm_alpha.weight", xb, n);
  }
  const Vec w = vec(p + "ssm_conv1d.weight"), dt = vec(p + "ssm_dt.bias"), a = vec(p + "ssm_a");
  Vec x(raw.size());
  for (int64_t t = 0; t < n; t++)
    for (int64_t c = 0; c < ch; c++) {
      double s = 0;
      for (int64_t i = 0; i < taps; i++)
        if (t - (taps - 1) + i >= 0) s += raw[(t - (taps - 1) + i) * ch + c] * w[c * taps + i];
      x[t * ch + c] = s / (1.0 + std::exp(-s));
    }
  for (int64_t t = 0; t < n; t++)
    for (int64_t h = 0; h < 2LL * g.n_k_heads; h++) {
      double sq = 0;
      for (int64_t i = 0; i < S; i++) sq += x[t * ch + h * S + i] * x[t * ch + h * S + i];
      for (int64_t i = 0; i < S; i++) x[t * ch + h * S + i] /= std::sqrt(sq + g.eps);
    }
  Vec o(static_cast<size_t>(n * vd));
  for (int64_t h = 0; h < hv; h++) {
    const int64_t kh = g.key_head(static_cast<int>(h));
    Vec st(static_cast<size_t>(S * S), 0.0);
    for (int64_t t = 0; t < n; t++) {
      const double* q = x.data() + t * ch + kh * S;
      const double* k = q + g.key_dim();
      const double* v = x.data() + t * ch + 2 * g.key_dim() + h * S;
      const double ab = alpha[t * hv + h] + dt[h];
      const double decay = std::exp((ab > 20 ? ab : std::log1p(std::exp(ab))) * a[h]);
      const double b = 1.0 / (1.0 + std::exp(-beta[t * hv + h]));
      for (double& e : st) e *= decay;
      for (int64_t j = 0; j < S; j++) {
        double sk = 0;
        for (int64_t i = 0; i < S; i++) sk += st[i * S + j] * k[i];
        for (int64_t i = 0; i < S; i++) st[i * S + j] += k[i] * b * (v[j] - sk);
      }
      for (int64_t j = 0; j < S; j++) {
        double y = 0;
        for (int64_t i = 0; i < S; i++) y += st[i * S + j] * q[i];
        o[t * vd + h * S + j] = y / std::sqrt(static_cast<double>(S));
      }
    }
  }
  attention[l] = o;
  Vec y = rmsnorm(o, vec(p + "ssm_norm.weight"), n * hv, S);
  for (size_t i = 0; i < y.size(); i++) y[i] *= z[i] / (1.0 + std::exp(-z[i]));
  return matmul(p + "ssm_out.weight", y, n);
}

void F64Decoder::run_hybrid(const std::vector<int32_t>& tokens) {
  const int64_t n = static_cast<int64_t>(tokens.size()), dim = c_.n_embd;
  Vec x(static_cast<size_t>(n * dim));
  std::vector<float> row(static_cast<size_t>(dim));
  const GgufTensorInfo* emb = tensor("token_embd.weight");
  for (int64_t t = 0; t < n; t++) {
    dequantize_row(emb->type, emb->data + tokens[t] * row_bytes(emb->type, dim), row.data(), dim);
    for (int64_t i = 0; i < dim; i++) x[t * dim + i] = row[i];
  }
  for (auto* v : {&q_rope, &attention, &attn_branch, &ffn_branch, &residual}) v->assign(c_.n_layer, {});
  selected.assign(c_.n_layer, {});
  for (int l = 0; l < c_.n_layer; l++) {
    const std::string p = fmt::format("blk.{}.", l);
    const Vec xb = rmsnorm(x, vec(p + "attn_norm.weight"), n, dim);
    attn_branch[l] = hybrid_config(c_).is_recurrent(l) ? delta_net(l, xb, n) : gated_attend(l, xb, n);
    for (size_t i = 0; i < x.size(); i++) x[i] += attn_branch[l][i];
    ffn_branch[l] = ffn(p, rmsnorm(x, vec(p + "post_attention_norm.weight"), n, dim), n);
    for (size_t i = 0; i < x.size(); i++) x[i] += ffn_branch[l][i];
    residual[l] = x;
  }
  logits = matmul(has("output.weight") ? "output.weight" : "token_embd.weight",
                  rmsnorm(x, vec("output_norm.weight"), n, dim), n);
}

}  // namespace kestrel

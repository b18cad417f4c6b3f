// Gemma 4's float64 pass (model/arch/gemma4.cpp has the math; measure/f64_reference.h the decoder).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "formats/block_formats.h"
#include "measure/f64_reference.h"
#include "model/arch/gemma4.h"

namespace kestrel {

void F64Decoder::run_gemma4(const std::vector<int32_t>& tokens) {
  const Gemma4Config& g = gemma4_config(c_);
  const int64_t n = static_cast<int64_t>(tokens.size()), dim = c_.n_embd, npl = g.per_layer, width = c_.n_layer * npl;
  Vec x(static_cast<size_t>(n * dim));
  std::vector<float> row(static_cast<size_t>(std::max(dim, width)));
  const GgufTensorInfo* emb = tensor("token_embd.weight");
  for (int64_t t = 0; t < n; t++) {
    dequantize_row(emb->type, emb->data + tokens[t] * row_bytes(emb->type, dim), row.data(), dim);
    for (int64_t i = 0; i < dim; i++) x[t * dim + i] = row[i] * std::sqrt(static_cast<double>(dim));
  }
  // Per-layer inputs P, [token][layer][npl].
  Vec P;
  if (npl > 0) {
    P = matmul("per_layer_model_proj.weight", x, n);
    for (auto& z : P) z /= std::sqrt(static_cast<double>(dim));
    P = rmsnorm(P, vec("per_layer_proj_norm.weight"), n * c_.n_layer, npl);
    const GgufTensorInfo* pe = tensor("per_layer_token_embd.weight");
    for (int64_t t = 0; t < n; t++) {
      dequantize_row(pe->type, pe->data + tokens[t] * row_bytes(pe->type, width), row.data(), width);
      for (int64_t i = 0; i < width; i++)
        P[t * width + i] = (P[t * width + i] + row[i] * std::sqrt(static_cast<double>(npl))) / std::sqrt(2.0);
    }
  }
  for (auto* v : {&q_rope, &attention, &attn_branch, &ffn_branch, &residual}) v->assign(c_.n_layer, {});
  selected.assign(c_.n_layer, {});
  std::vector<Vec> keys(static_cast<size_t>(c_.n_layer)), values(keys.size());
  const int nh = c_.n_head;
  for (int l = 0; l < c_.n_layer; l++) {
    const std::string p = fmt::format("blk.{}.", l);
    const bool sliding = c_.is_sliding(l);
    const int hd = sliding ? g.head_dim_sliding : c_.head_dim, nkv = sliding ? g.n_head_kv_sliding : c_.n_head_kv;
    const RopeParams& rp = sliding ? rope_sliding_ : rope_;
    const Vec xb = rmsnorm(x, vec(p + "attn_norm.weight"), n, dim);
    Vec q = rmsnorm(matmul(p + "attn_q.weight", xb, n), vec(p + "attn_q_norm.weight"), n * nh, hd);
    rope_at(q, n, nh, hd, 0, rp);
    if (g.keeps_kv(l)) {
      Vec k = matmul(p + "attn_k.weight", xb, n);
      const Vec v = has(p + "attn_v.weight") ? matmul(p + "attn_v.weight", xb, n) : k;  // v from k's projection
      values[l] = rmsnorm(v, Vec(static_cast<size_t>(hd), 1.0), n * nkv, hd);      // weightless
      keys[l] = rmsnorm(k, vec(p + "attn_k_norm.weight"), n * nkv, hd);
      rope_at(keys[l], n, nkv, hd, 0, rp);
    }
    const int src = g.kv_source(l, sliding);
    q_rope[l] = q;
    attention[l] = attend(q, keys[src], values[src], n, l, hd, nkv);
    const Vec a = rmsnorm(matmul(p + "attn_output.weight", attention[l], n), vec(p + "post_attention_norm.weight"), n, dim);
    attn_branch[l] = a;
    for (size_t i = 0; i < x.size(); i++) x[i] += a[i];
    Vec f = gated(p, "", rmsnorm(x, vec(p + "ffn_norm.weight"), n, dim), n, g.n_ff[l], true);
    if (has(p + "ffn_gate_inp.weight")) {  // experts beside the dense FFN, each half normed
      f = rmsnorm(f, vec(p + "post_ffw_norm_1.weight"), n, dim);
      Vec router_in = rmsnorm(x, Vec(static_cast<size_t>(dim), 1.0), n, dim);
      const Vec scale = vec(p + "ffn_gate_inp.scale");
      for (int64_t t = 0; t < n; t++)
        for (int64_t i = 0; i < dim; i++) router_in[t * dim + i] *= scale[i] / std::sqrt(static_cast<double>(dim));
      const Vec m = rmsnorm(moe(p, rmsnorm(x, vec(p + "pre_ffw_norm_2.weight"), n, dim), n, &router_in),
                            vec(p + "post_ffw_norm_2.weight"), n, dim);
      for (size_t i = 0; i < f.size(); i++) f[i] += m[i];
    }
    f = rmsnorm(f, vec(p + "post_ffw_norm.weight"), n, dim);
    ffn_branch[l] = f;
    for (size_t i = 0; i < x.size(); i++) x[i] += f[i];
    if (npl > 0) {
      Vec gate = matmul(p + "inp_gate.weight", x, n);
      for (int64_t t = 0; t < n; t++)
        for (int64_t i = 0; i < npl; i++) gate[t * npl + i] = gelu(gate[t * npl + i]) * P[t * width + l * npl + i];
      const Vec pr = rmsnorm(matmul(p + "proj.weight", gate, n), vec(p + "post_norm.weight"), n, dim);
      for (size_t i = 0; i < x.size(); i++) x[i] += pr[i];
    }
    if (has(p + "layer_output_scale.weight")) {
      const double s = vec(p + "layer_output_scale.weight")[0];
      for (auto& z : x) z *= s;
    }
    residual[l] = x;
  }
  const Vec xn = rmsnorm(x, vec("output_norm.weight"), n, dim);
  logits = matmul(has("output.weight") ? "output.weight" : "token_embd.weight", xn, n);
  if (c_.final_softcap > 0)
    for (auto& z : logits) z = c_.final_softcap * std::tanh(z / c_.final_softcap);
}

}  // namespace kestrel

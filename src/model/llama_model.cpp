// The Llama-family layer, top to bottom:
//   x = embed(tokens)
//   for each layer:
//     h = rmsnorm(x) ; q,k,v = h.Wq, h.Wk, h.Wv (+bias for Qwen2) ; rope(q,k)
//     kv[pos] = k,v ; x += attention(q, kv) . Wo
//     h = rmsnorm(x) ; x += (silu(h.Wgate) * h.Wup) . Wdown
//   logits = rmsnorm(x) . Wout     (only for rows that asked)
#include "model/llama_model.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "model/batch_io.h"
#include "model/llama_config.h"
#include "model/weight_loader.h"

namespace kestrel {
namespace {

struct LlamaLayer {
  std::vector<float> attn_norm, ffn_norm;
  std::vector<float> bq, bk, bv;  // Qwen2 only
  Weight wq, wk, wv, wo, w_gate, w_up, w_down;
};

struct LlamaWeights {
  Weight tok_embd, output;
  std::vector<float> output_norm;
  std::vector<LlamaLayer> layers;
};

// Scratch activations for the largest batch, allocated once.
struct LlamaScratch {
  explicit LlamaScratch(const ModelConfig& c, int64_t max_n) {
    const int64_t q_dim = static_cast<int64_t>(c.n_head) * c.head_dim;
    const int64_t kv_dim = static_cast<int64_t>(c.n_head_kv) * c.head_dim;
    x.resize(max_n * c.n_embd);
    xb.resize(max_n * std::max(c.n_embd, q_dim));
    xb2.resize(max_n * c.n_embd);
    q.resize(max_n * q_dim);
    k.resize(max_n * kv_dim);
    v.resize(max_n * kv_dim);
    att.resize(max_n * q_dim);
    hb.resize(max_n * c.n_ff);
    hb2.resize(max_n * c.n_ff);
    block_tables.resize(max_n);
    slots.resize(max_n);
  }
  std::vector<float> x, xb, xb2, q, k, v, att, hb, hb2;
  std::vector<const int32_t*> block_tables;
  std::vector<int64_t> slots;
};

class LlamaModel final : public Model {
 public:
  LlamaModel(const GgufFile& f, Backend& be, const ModelOptions& opt)
      : cfg_(read_llama_config(f)), be_(be), max_batch_(opt.max_batch_tokens), s_(cfg_, opt.max_batch_tokens) {
    load(f);
    if (opt.log_fusion) log_fusion();
  }

  const ModelConfig& config() const override { return cfg_; }
  KvLayout kv_layout() const override {
    const int64_t kv_dim = static_cast<int64_t>(cfg_.n_head_kv) * cfg_.head_dim;
    return {cfg_.n_layer, kv_dim, kv_dim, cfg_.head_dim};
  }
  int64_t max_batch_tokens() const override { return max_batch_; }

  void forward(const Batch& b, PagedKvCache& kv, float* logits, float* hidden) override {
    const int64_t n = b.size();
    if (n == 0) return;
    if (n > max_batch_) throw Error(fmt::format("batch of {} tokens exceeds the planned maximum {}", n, max_batch_));
    const ModelConfig& c = cfg_;
    const int64_t dim = c.n_embd, hd = c.head_dim;
    const int64_t kv_dim = c.n_head_kv * hd;
    place_batch(b, kv, c.n_vocab, s_.slots.data(), s_.block_tables.data());

    float* x = s_.x.data();
    be_.annotate_layer(-1);
    be_.embed(w_.tok_embd, b.tokens.data(), n, x);
    const AttentionShape shape{c.n_head, c.n_head_kv, c.head_dim, 1.0f / std::sqrt(static_cast<float>(hd))};

    for (int l = 0; l < c.n_layer; l++) {
      const LlamaLayer& L = w_.layers[l];
      be_.annotate_layer(l);
      float *xb = s_.xb.data(), *q = s_.q.data(), *k = s_.k.data(), *v = s_.v.data();

      be_.rmsnorm(x, L.attn_norm.data(), xb, n, dim, c.rms_eps);
      const Weight* qkv[3] = {&L.wq, &L.wk, &L.wv};
      const float* bias[3] = {nullptr, nullptr, nullptr};
      if (c.qkv_bias) bias[0] = L.bq.data(), bias[1] = L.bk.data(), bias[2] = L.bv.data();
      float* qkv_out[3] = {q, k, v};
      be_.qkv_rope(qkv, bias, xb, n, b.positions.data(), c.rope, {c.n_head, c.n_head_kv, c.head_dim}, qkv_out);
      for (int64_t i = 0; i < n; i++) {
        kv.write_k(l, s_.slots[i], k + i * kv_dim);
        kv.write_v(l, s_.slots[i], v + i * kv_dim);
      }
      be_.attention(kv.layer_view(l), {n, q, s_.att.data(), b.positions.data(), s_.block_tables.data()}, shape);
      be_.matmul(L.wo, s_.att.data(), n, s_.xb2.data());
      be_.add(x, s_.xb2.data(), n * dim);

      be_.rmsnorm(x, L.ffn_norm.data(), xb, n, dim, c.rms_eps);
      be_.swiglu(L.w_gate, L.w_up, xb, n, s_.hb.data(), s_.hb2.data());
      be_.matmul(L.w_down, s_.hb.data(), n, s_.xb2.data());
      be_.add(x, s_.xb2.data(), n * dim);
    }

    // Norm + output projection on the rows that want logits only.
    output_logits(be_, b, x, dim, w_.output_norm.data(), c.rms_eps, w_.output, s_.xb.data(), logits, hidden);
  }

 private:
  void load(const GgufFile& f) {
    const ModelConfig& c = cfg_;
    WeightLoader ld(f);
    const int64_t dim = c.n_embd, q_dim = c.n_head * c.head_dim, kv_dim = c.n_head_kv * c.head_dim;
    w_.tok_embd = ld.require("token_embd.weight", {dim, c.n_vocab});
    w_.output_norm = ld.require_vector("output_norm.weight", dim);
    // A tied output matrix gets its own prepared copy: the embedding lookup keeps reading the file's rows.
    w_.output = be_.prepare_weight(c.tied_output ? w_.tok_embd : ld.require("output.weight", {dim, c.n_vocab}));
    for (int l = 0; l < c.n_layer; l++) {
      const std::string p = fmt::format("blk.{}.", l);
      LlamaLayer L;
      L.attn_norm = ld.require_vector(p + "attn_norm.weight", dim);
      L.wq = be_.prepare_weight(ld.require(p + "attn_q.weight", {dim, q_dim}));
      L.wk = be_.prepare_weight(ld.require(p + "attn_k.weight", {dim, kv_dim}));
      L.wv = be_.prepare_weight(ld.require(p + "attn_v.weight", {dim, kv_dim}));
      L.wo = be_.prepare_weight(ld.require(p + "attn_output.weight", {q_dim, dim}));
      if (c.qkv_bias) {
        L.bq = ld.require_vector(p + "attn_q.bias", q_dim);
        L.bk = ld.require_vector(p + "attn_k.bias", kv_dim);
        L.bv = ld.require_vector(p + "attn_v.bias", kv_dim);
      }
      L.ffn_norm = ld.require_vector(p + "ffn_norm.weight", dim);
      L.w_gate = be_.prepare_weight(ld.require(p + "ffn_gate.weight", {dim, c.n_ff}));
      L.w_up = be_.prepare_weight(ld.require(p + "ffn_up.weight", {dim, c.n_ff}));
      L.w_down = be_.prepare_weight(ld.require(p + "ffn_down.weight", {c.n_ff, dim}));
      w_.layers.push_back(std::move(L));
    }
  }

  // Says which fused operators the backend will run for these weights.
  void log_fusion() const {
    int qkv = 0, ffn = 0;
    for (const auto& L : w_.layers) {
      qkv += be_.fuses(L.wq, L.wk) && be_.fuses(L.wq, L.wv);
      ffn += be_.fuses(L.w_gate, L.w_up);
    }
    const int n = cfg_.n_layer;
    fmt::print(stderr, "fusion: attn_q+attn_k+attn_v(+bias)+RoPE: one activation preparation, one parallel pass in whole heads, bias and RoPE in the epilogue: {} of {} layers\n", qkv, n);
    fmt::print(stderr, "fusion: ffn_gate+ffn_up+SwiGLU: one pass, silu(gate)*up applied in the epilogue: {} of {} layers\n", ffn, n);
    fmt::print(stderr, "fusion: not fused: the residual adds, RMSNorm (its output is quantized once per fused pass)\n");
  }

  ModelConfig cfg_;
  Backend& be_;
  int64_t max_batch_;
  LlamaWeights w_;
  LlamaScratch s_;
};

}  // namespace

std::unique_ptr<Model> make_llama_model(const GgufFile& file, Backend& backend, const ModelOptions& options) {
  return std::make_unique<LlamaModel>(file, backend, options);
}

}  // namespace kestrel

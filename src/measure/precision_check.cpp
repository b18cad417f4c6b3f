#include "measure/precision_check.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <string>

#include "formats/block_formats.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "backend/forwarding_backend.h"
#include "ops/gated_delta_net.h"
#include "ops/hyper_connection.h"
#include "ops/lightning_indexer.h"
#include "model/batch.h"
#include "measure/f64_reference.h"
#include "model/arch/deepseek4.h"
#include "model/arch/qwen35_layer.h"
#include "runtime/generator.h"

namespace kestrel {
namespace {

enum Probe { kQ, kAttention, kAttnProj, kFfn, kResidual, kProbes };

// Forwards everything; copies the probed outputs of the current layer.
class ActivationRecorder final : public ForwardingBackend {
 public:
  explicit ActivationRecorder(Backend& inner) : ForwardingBackend(inner) {}
  std::map<int, std::vector<float>> got[kProbes];  // per probe, per layer (-1: outside the layers)

  void annotate_layer(int layer) override {
    if (layer != layer_) adds_ = 0;
    layer_ = layer;
    in_.annotate_layer(layer);
  }
  void qkv_rope(const Weight* const* w, const float* const* b, Act x, int64_t n, const int32_t* pos,
                const RopeParams& rope, const QkvShape& shape, const Act* out) override {
    in_.qkv_rope(w, b, x, n, pos, rope, shape, out);
    keep(kQ, out[0], n * w[0]->rows());
  }
  void attention(const PagedKvLayerView& kv, const AttentionRows& b, const AttentionShape& s) override {
    in_.attention(kv, b, s);
    // The queries as attention reads them: after RoPE and what follows it (Mistral 3's temperature, Llama 4's
    // norms); MLA's are not compared.
    keep(kQ, b.q, b.n_tokens * s.n_head * s.head_dim);
    keep(kAttention, b.out, b.n_tokens * s.n_head * s.value_dim());
  }
  // The indexer's choices of the layer: per row, its positions.
  std::map<int, std::vector<std::vector<int32_t>>> selections;
  void run(const Operator& op, const void* args) override {
    in_.run(op, args);
    if (const auto* a = ops::gated_delta_net.args_if(op, args)) {
      // A Gated DeltaNet block's "attention": the recurrence's output, before its gated norm.
      int64_t rows = 0;
      for (int i = 0; i < a->n_seqs; i++) rows += a->seqs[i].n;
      keep(kAttention, a->out, rows * a->shape.value_dim());
    } else if (const auto* ix = ops::indexer_top_k.args_if(op, args)) {
      auto& rows = selections[layer_];
      rows.clear();
      for (int64_t t = 0; t < ix->rows.n_tokens; t++)
        rows.emplace_back(ix->selected + t * ix->shape.top_k, ix->selected + t * ix->shape.top_k + ix->counts[t]);
    } else if (const auto* hx = ops::hyper_expand.args_if(op, args)) {
      // DeepSeek-V4's residual: each branch's output spread over the streams (attention first, then the FFN).
      if (adds_++ == 0) keep(kAttnProj, hx->y, hx->n * hx->dim);
      keep(kFfn, hx->y, hx->n * hx->dim);
      keep(kResidual, hx->out, hx->n * hx->hc * hx->dim);
    }
  }
  // A layer's first residual add takes the attention branch, its second (into the same stream) the FFN branch,
  // its last leaves the layer's output (Gemma 4 adds its per-layer embedding third, then scales the stream);
  // adds within a branch (a MoE layer's shared expert, Gemma 4's dense FFN beside its experts) are not the
  // stream's.
  void add(Act x, Act y, int64_t n) override {
    in_.add(x, y, n);
    if (adds_ == 0)
      stream_ = x, keep(kAttnProj, y, n);
    else if (!(x == stream_))
      return;
    if (adds_++ < 2) keep(kFfn, y, n);
    keep(kResidual, x, n);
  }
  void scale(Act x, int64_t n, float s) override {
    in_.scale(x, n, s);
    if (adds_ > 0 && x == stream_) keep(kResidual, x, n);
  }

 private:
  // (Through map: a device backend finishes its recorded work first.)
  void keep(Probe p, Act a, int64_t n) {
    const float* v = in_.map(a, n);
    got[p][layer_].assign(v, v + n);
  }
  int layer_ = -1;
  int adds_ = 0;
  Act stream_;  // the residual stream the layer's first add wrote
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

PrecisionReport precision_check(LoadedModel& e, const std::vector<int32_t>& tokens) {
  // (With LoRA adapters the recorder sits inside their layer: it sees the products with their updates added.)
  auto* rec = dynamic_cast<ActivationRecorder*>(e.lora ? &e.lora->inner() : e.backend.get());
  if (!rec) throw Error("precision-check: the engine was not built with make_activation_recorder");
  const ModelConfig& c = e.model->config();
  const bool dsv4 = family_of(c.arch).recipe.attention == LayerRecipe::Attention::Compressed;
  const HybridConfig* hybrid = family_part_if<HybridConfig>(c.family);  // its Gated DeltaNet blocks have no q
  const bool mla = dsv4 || family_of(c.arch).recipe.attention == LayerRecipe::Attention::Mla;  // q, attention: "-" 
  const auto n = static_cast<int64_t>(tokens.size());
  if (n < 1 || n > e.model->max_batch_tokens() || n > e.n_ctx)
    throw Error(fmt::format("precision-check: {} tokens; give 1 to {} (one batch within the context)", n,
                            std::min(e.model->max_batch_tokens(), e.n_ctx)));
  // One batch (n is within the model's): every position's logits, and the
  // recorder keeps every layer's activations.
  std::vector<float> logits;
  logits.reserve(static_cast<size_t>(n * c.n_vocab));
  GenerationParams p;
  p.max_tokens = 0;
  p.all_logits = true;
  p.lora = e.default_lora();
  GenerationCallbacks cb;
  cb.on_logits = [&](const float* row, int64_t nv) { logits.insert(logits.end(), row, row + nv); };
  generate(e, tokens, p, cb);
  e.kv->erase(0);

  F64Decoder ref(*e.file, c, e.n_ctx, e.backend->n_threads());
  if (p.lora) {
    std::vector<std::pair<const LoraAdapter*, float>> list;
    for (const auto& [adapter, scale] : p.lora->adapters) list.emplace_back(adapter.get(), scale);
    ref.set_lora(std::move(list));
  }
  ref.run(tokens);
  PrecisionReport r;
  r.n_tokens = n;
  for (int l = 0; l < c.n_layer; l++) {
    LayerPrecision lp;
    lp.layer = l;
    // (A Gated DeltaNet block has no rotated queries: "-".)
    lp.q_rope = mla || (hybrid && hybrid->is_recurrent(l)) ? NAN : relative_error(rec->got[kQ][l], ref.q_rope[l]);
    lp.attention = mla ? NAN : relative_error(rec->got[kAttention][l], ref.attention[l]);
    r.indexer = r.indexer || !ref.selected[l].empty();
    if (dsv4 && !ref.selected[l].empty()) {  // DeepSeek-V4's ratio-4 layers: the blocks each row chose
      const auto& got = rec->selections[l];
      if (got.size() != ref.selected[l].size())
        throw Error(fmt::format("precision-check: layer {}: the indexer chose for {} rows, the reference for {}", l,
                                got.size(), ref.selected[l].size()));
      for (size_t t = 0; t < got.size(); t++) {
        if ((static_cast<int64_t>(t) + 1) / 4 <= dsv4_config(c).idx_top_k) continue;  // up to top_k blocks: all chosen
        lp.selected_rows++;
        lp.selected_same += got[t] == ref.selected[l][t];
      }
    } else if (!ref.selected[l].empty()) {  // the layers with an indexer of their own
      const auto& got = rec->selections[l];
      if (got.size() != ref.selected[l].size())
        throw Error(fmt::format("precision-check: layer {}: the indexer chose for {} rows, the reference for {}", l,
                                got.size(), ref.selected[l].size()));
      for (size_t t = 0; t < got.size(); t++) {
        if (static_cast<int>(t) + 1 <= c.mla.indexer.top_k) continue;
        lp.selected_rows++;
        lp.selected_same += got[t] == ref.selected[l][t];
      }
    }
    lp.attn_proj = relative_error(rec->got[kAttnProj][l], ref.attn_branch[l]);
    lp.ffn = relative_error(rec->got[kFfn][l], ref.ffn_branch[l]);
    lp.residual = relative_error(rec->got[kResidual][l], ref.residual[l]);
    r.layers.push_back(lp);
  }
  r.logits = relative_error(logits, ref.logits);
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
    const double angle = F64Decoder::rope_angle(c.rope, pos, i), m = F64Decoder::rope_mscale(c.rope);
    r.rope_max_error = std::max(
        {r.rope_max_error, std::fabs(head[i0] - std::cos(angle) * m), std::fabs(head[i1] - std::sin(angle) * m)});
  }
  return r;
}

}  // namespace kestrel

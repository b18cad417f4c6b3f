#include "model/layer_stack.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "model/family.h"

namespace kestrel {

LayerStack::LayerStack(Backend& be, const ModelOptions& opt, ModelConfig cfg)
    : cfg_(std::move(cfg)), be_(be), max_batch_(opt.max_batch_tokens), shard_(opt.shard) {
  // This rank's layers and widths, checked before any weight is read, so
  // that a split that cannot be made says so.
  const ModelConfig& c = cfg_;
  if (shard_.stages > c.n_layer)
    throw Error(fmt::format("pipeline parallelism over {} stages: the model has only {} layers", shard_.stages,
                            c.n_layer));
  first_ = shard_.first_layer(c.n_layer);
  end_ = shard_.end_layer(c.n_layer);
  if (shard_.experts_split() && c.moe.routing.n_expert == 0)
    throw Error(fmt::format("expert parallelism (ep={}) needs a mixture-of-experts model; {} is dense (use tp)",
                            shard_.ep, c.arch));
  local_moe_ = split_moe_widths(c.moe, shard_);
  // A file's feed_forward_length describes no tensor when every layer has experts (Qwen3-MoE).
  // A dense FFN somewhere: no experts, dense lead layers, or experts only every layer_step-th layer (Llama 4).
  if (c.moe.routing.n_expert == 0 || c.moe.n_dense_lead > 0 || c.moe.layer_step > 1 || c.moe.dense_beside)
    local_n_ff_ = shard_.share(c.n_ff, "FFN rows");
}

void LayerStack::init(const GgufFile& f, const ModelOptions& opt) {
  load(f, opt);
  allocate_stack();
  allocate(max_batch_);
  if (opt.log_fusion) log_fusion();
}

std::string LayerStack::layer_prefix(int layer) { return fmt::format("blk.{}.", layer); }

void LayerStack::load(const GgufFile& f, const ModelOptions& opt) {
  if (opt.mtp_file && !reads_mtp_file())
    throw Error(fmt::format("a separate MTP file (--spec mtp --draft-model): {} models carry their multi-token-prediction block in the model file",
                            cfg_.arch));
  WeightLoader ld(f);
  io_ = load_io_weights(ld, be_, cfg_, shard_.leader(), shard_.stage == 0);
  // A reranker's head (llama.cpp's cls.output: Qwen3-Reranker's "yes"/"no" rows of its output matrix).
  if (cfg_.pooling_type == 4 && ld.has("cls.output.weight")) {
    if (!family_of(cfg_.arch).classifier_head)
      throw Error(fmt::format("{}: a reranking head (cls.output) is implemented for qwen3's rerankers, not for {}",
                              f.path(), cfg_.arch));
    if (cfg_.classifier_labels.empty())
      throw Error(fmt::format("{}: cls.output.weight without {}.classifier.output_labels", f.path(), cfg_.arch));
    classifier_ = ld.optional_floats("cls.output.weight",
                                     {cfg_.n_embd, static_cast<int64_t>(cfg_.classifier_labels.size())});
  }
  load_extra(ld, opt);
  for (int l = 0; l < cfg_.n_layer; l++)
    if (l >= first_ && l < end_)
      load_layer(ld, l);
    else
      ld.skip_prefix(layer_prefix(l), "pipeline parallelism: another stage's layer");
  ld.finish(cfg_.arch);
}

std::vector<float> LayerStack::classify(const float* pooled) const {
  if (classifier_.empty()) return {};
  const int64_t dim = cfg_.n_embd;
  const size_t n = cfg_.classifier_labels.size();
  std::vector<double> z(n);
  for (size_t k = 0; k < n; k++)
    for (int64_t d = 0; d < dim; d++) z[k] += static_cast<double>(classifier_[k * dim + d]) * pooled[d];
  // (softmax: llama.cpp's head for Qwen3's rerankers; a head of other families would say otherwise)
  const double m = *std::max_element(z.begin(), z.end());
  double sum = 0;
  for (double& v : z) sum += (v = std::exp(v - m));
  std::vector<float> out(n);
  for (size_t k = 0; k < n; k++) out[k] = static_cast<float>(z[k] / sum);
  return out;
}

void LayerStack::allocate_stack() {
  const int64_t n = max_batch_, dim = cfg_.n_embd;
  x_store_ = ActBuffer(be_, n * state_dim());
  x_ = x_store_;
  in_flight_.resize(be_, steps_in_flight(), n * state_dim());
  xb_ = ActBuffer(be_, n * dim);
  y_ = ActBuffer(be_, n * dim);
  hb_ = ActBuffer(be_, n * local_n_ff_);
  hb2_ = ActBuffer(be_, n * local_n_ff_);
  if (cfg_.moe.routing.n_expert > 0) {
    moe_ = std::make_unique<MoeFfn>(be_, dim, local_moe_, n);
    if (shard_.combines_experts())
      for (auto& combine : combine_) combine = std::make_unique<ExpertCombine>(*shard_.experts_comm(), dim, n);
  }
}

void LayerStack::check_batch_size(int64_t n) const {
  if (n > max_batch_) throw Error(fmt::format("batch of {} tokens exceeds the planned maximum {}", n, max_batch_));
}

void LayerStack::forward(const Batch& b, const BatchPlacement& place, KvStore& kv, float* logits, float* hidden) {
  const int64_t n = b.size();
  if (n == 0) return;
  check_batch_size(n);
  be_.annotate_batch(b);
  begin_step(b, place);
  if (!shard_.pipelined()) {
    embed(b, 0, n);
    run_layers(b, place, kv, 0, n);
  } else {
    run_pipeline_stage(
        shard_, comm(x_, n * state_dim()), n, state_dim(), micro_batches(n),
        [&](int64_t r0, int64_t rows) { embed(b, r0, rows); },
        [&](int64_t r0, int64_t rows) { run_layers(b, place, kv, r0, rows); });
    if (shard_.stage != 0) return;
  }
  if (!logits && !hidden) return;  // a tensor-parallel rank that does not sample
  head(b, x_, io_.output_norm, io_.output, logits, hidden);
}

void LayerStack::start_forward(const Batch& b, const BatchPlacement& place, KvStore& kv, int slot) {
  check_batch_size(b.size());
  be_.annotate_batch(b);
  begin_step(b, place);
  in_flight_.start(
      shard_, slot, b, b.size(), state_dim(), micro_batches(b.size()), x_,
      [&](int64_t r0, int64_t rows) { embed(b, r0, rows); },
      [&](int64_t r0, int64_t rows) { run_layers(b, place, kv, r0, rows); });
}

void LayerStack::finish_forward(int slot, float* logits) {
  const auto [b, back] = in_flight_.finish(shard_, slot);
  if (logits) head(*b, back, io_.output_norm, io_.output, logits, nullptr);  // (null: a step drained at the end)
}

// A micro-batch re-reads the stage's weights: fewer rows than this and a
// step is bound by that reading, so splitting it costs more than the
// stages' overlap saves (1.1B Q4_0, one core: 8 rows cost 1.6x one row, 16
// rows 2.2x; decode at 8 requests, pp=2: TPOT 183 ms in 4 parts, 145 whole).
int64_t LayerStack::micro_batches(int64_t n) {
  constexpr int64_t kMicroBatches = 4, kMinMicroRows = 16;
  return std::clamp<int64_t>(n / kMinMicroRows, 1, kMicroBatches);
}

void LayerStack::embed_rows(const Weight& table, const Batch& b, int64_t r0, int64_t n) {
  const int64_t dim = cfg_.n_embd;
  const Act x = x_ + r0 * state_dim();
  be_.annotate_layer(-1);
  be_.annotate_rows(nullptr, r0, n);
  if (streams_ > 1) {
    // Every stream starts as the embedding.
    be_.embed(table, b.tokens.data() + r0, n, xb_);
    for (int s = 0; s < streams_; s++) be_.copy(x + s * dim, state_dim(), xb_, dim, n, dim);
    return;
  }
  be_.embed(table, b.tokens.data() + r0, n, x);
  if (cfg_.embed_scale != 1.0f) be_.scale(x, n * dim, cfg_.embed_scale);
  // Media rows: their rows replace the embeddings of their placeholder tokens, unscaled.
  copy_media_rows(b, x, r0, n);
}

void LayerStack::copy_media_rows(const Batch& b, Act x, int64_t r0, int64_t n) {
  const int64_t dim = cfg_.n_embd;
  const auto m = static_cast<int64_t>(b.embd_rows.size());
  for (int64_t i = 0; i < m;) {
    int64_t j = i + 1;  // a run of consecutive rows, one copy
    while (j < m && b.embd_rows[j] == b.embd_rows[j - 1] + 1) j++;
    const int64_t first = std::max(b.embd_rows[i], r0), last = std::min(b.embd_rows[j - 1] + 1, r0 + n);
    if (first < last)
      be_.copy(x + (first - r0) * dim, dim, be_.host_view(b.embd.data() + (i + first - b.embd_rows[i]) * dim), dim,
               last - first, dim);
    i = j;
  }
}

void LayerStack::allocate_nextn(int64_t max_rows) {
  const int64_t rows = max_rows * cfg_.n_embd;
  nextn_e_ = ActBuffer(be_, rows);
  nextn_h_ = ActBuffer(be_, rows);
  nextn_cat_ = ActBuffer(be_, 2 * rows);
}

MtpTensors load_mtp_tensors(const WeightLoader& ld, Backend& be, int layer, int64_t dim, int64_t n_vocab,
                            const IoWeights& io) {
  const std::string p = fmt::format("blk.{}.nextn.", layer);
  MtpTensors m;
  m.eh_proj = be.prepare_weight(ld.require(p + "eh_proj.weight", {2 * dim, dim}));
  m.enorm = ld.require_vector(p + "enorm.weight", dim);
  m.hnorm = ld.require_vector(p + "hnorm.weight", dim);
  m.head_norm = ld.optional_vector(p + "shared_head_norm.weight", dim);
  if (m.head_norm.empty()) m.head_norm = io.output_norm;
  m.embed = ld.optional(p + "embed_tokens.weight", {dim, n_vocab});
  if (!m.embed.present()) m.embed = io.tok_embd;
  const Weight head = ld.optional(p + "shared_head_head.weight", {dim, n_vocab});
  m.head = head.present() ? be.prepare_weight(head) : io.output;
  return m;
}

void LayerStack::skip_unloaded_mtp(const WeightLoader& ld) const {
  for (int l = cfg_.n_layer + mtp_layers(); l < cfg_.n_layer + cfg_.n_mtp; l++)
    ld.skip_prefix(layer_prefix(l), "multi-token-prediction block not loaded");
}

void LayerStack::forward_mtp(const Batch& b, const BatchPlacement& place, KvStore& kv, const float* hidden_in,
                             float* logits, float* hidden_out) {
  if (!nextn_) Model::forward_mtp(b, place, kv, hidden_in, logits, hidden_out);
  if (b.size() == 0) return;
  check_batch_size(b.size());
  be_.annotate_batch(b);
  begin_step(b, place);
  run_nextn_block(b, place, kv, *nextn_, hidden_in, logits, hidden_out);
}

void LayerStack::run_nextn_block(const Batch& b, const BatchPlacement& place, KvStore& kv, const MtpTensors& m,
                                 const float* hidden_in, float* logits, float* hidden_out) {
  const int64_t n = b.size(), dim = cfg_.n_embd;
  const Act e = nextn_e_, h = nextn_h_, cat = nextn_cat_;
  be_.annotate_layer(cfg_.n_layer);
  be_.embed(m.embed, b.tokens.data(), n, x_);
  be_.rmsnorm(x_, m.enorm.data(), e, n, dim, cfg_.rms_eps);
  be_.rmsnorm(be_.host_view(hidden_in), m.hnorm.data(), h, n, dim, cfg_.rms_eps);
  be_.copy(cat, 2 * dim, e, dim, n, dim);
  be_.copy(cat + dim, 2 * dim, h, dim, n, dim);
  be_.matmul(m.eh_proj, cat, n, x_);
  run_layer({b, place, kv, cfg_.n_layer, cfg_.n_layer, 0, n});
  if (hidden_out) {
    const Act out = be_.host_view(hidden_out);
    be_.copy(out, dim, x_, dim, n, dim);
    be_.read(out, hidden_out, n * dim);
  }
  head(b, x_, m.head_norm, m.head, logits, nullptr);
}

void LayerStack::head(const Batch& b, Act x, const std::vector<float>& norm, const Weight& output, float* logits,
                      float* hidden) {
  if (hidden && streams_ > 1) {
    const int64_t n = b.size() * state_dim();
    const Act h = be_.host_view(hidden);
    be_.copy(h, n, x, n, 1, n);
    be_.read(h, hidden, n);
    hidden = nullptr;
  }
  head_rows(b, head_input(x, b.size()), norm, output, logits, hidden);
}

void LayerStack::head_rows(const Batch& b, Act rows, const std::vector<float>& norm, const Weight& output,
                           float* logits, float* hidden) {
  const ModelConfig& c = cfg_;
  if (logits && b.best > 0) {  // the rows stay on the backend, their best candidates come back
    const int64_t n = b.n_logit_rows(), chunk = std::min<int64_t>(n, kBestChunk), k = b.best;
    if (2 * k > c.n_vocab) throw Error(fmt::format("the best {} of {} logits asked for", k, c.n_vocab));
    if (!b.best_ids || (k > 1 && !b.best_vals)) throw Error("Batch::best without the buffers its candidates go to");
    best_rows_.ensure(be_, chunk * c.n_vocab);
    const BestOut best{best_rows_, chunk, c.final_softcap, b.best, b.best_ids, b.best_vals};
    output_logits(be_, b, rows, c.n_embd, norm.data(), c.rms_eps, output, xb_, Act(), hidden, &best);
    return;
  }
  const Act out = logits ? be_.host_view(logits) : Act();
  output_logits(be_, b, rows, c.n_embd, norm.data(), c.rms_eps, output, xb_, out, hidden);
  if (!logits) return;
  const int64_t n = b.n_logit_rows() * c.n_vocab;
  if (c.final_softcap > 0.0f) be_.softcap(out, n, c.final_softcap);
  be_.read(out, logits, n);
}

Act LayerStack::norm_rows(const LayerRows& r, const std::vector<float>& weight) {
  be_.rmsnorm(x(r), weight.data(), xb_, r.n, cfg_.n_embd, cfg_.rms_eps);
  return xb_;
}

void LayerStack::feed_forward(const FfnWeights& dense, const MoeWeights& moe, FfnActivation act, Act xb, int64_t n,
                              Act y, const int32_t* tokens, Act router_in) {
  if (moe.present())
    moe_->run(be_, moe, xb, n, y, tokens, router_in);
  else
    run_ffn(be_, dense, act, xb, n, hb_, hb2_, y);
}

void LayerStack::residual(int /*layer*/, Branch /*branch*/, Act x, Act y, int64_t /*r0*/, int64_t n) {
  be_.add(x, y, n * cfg_.n_embd);
}

void LayerStack::run_layer(const LayerRows& r) {
  const int64_t dim = cfg_.n_embd;
  const Act x = this->x(r), y = y_;
  be_.annotate_layer(r.layer);
  attention(r, y);
  shard_.sum(comm(y, r.n * dim), r.n * dim);
  residual(r.layer, Branch::Attention, x, y, r.r0, r.n);
  ffn(r, y);
  shard_.sum_ffn(comm(y, r.n * dim), r.n, dim, moe_layer(r.layer), combine_[0].get(), touched());
  residual(r.layer, Branch::Ffn, x, y, r.r0, r.n);
}

void LayerStack::run_layers(const Batch& b, const BatchPlacement& place, KvStore& kv, int64_t r0, int64_t n) {
  be_.annotate_rows(nullptr, r0, n);
  if (shard_.overlap && (shard_.split() || shard_.experts_split()) && n >= 2)
    return run_layers_overlapped(b, place, kv, r0, n);
  for (int l = first_; l < end_; l++) {
    run_layer(rows_of(b, place, kv, l, r0, n));
    // build_cvec: the layer's output, every residual stream of each row.
    if (const float* v = cvec_ ? cvec_->layer(l) : nullptr)
      be_.add_bias(x_ + r0 * state_dim(), v, n * streams_, cfg_.n_embd);
  }
}

void LayerStack::set_control_vector(std::shared_ptr<const ControlVector> cv) {
  // llama.cpp's Mistral Small 4 graph (mistral4.cpp) has no build_cvec: its control vectors change nothing.
  if (cv && cfg_.arch == "mistral4")
    throw Error("control vectors: llama.cpp's mistral4 graph applies none (it has no build_cvec), so Kestrel "
                "refuses them rather than compute another model");
  if (cv && (cv->n_embd != cfg_.n_embd || cv->n_layer != cfg_.n_layer))
    throw Error(fmt::format("control vectors for {} layers of {} on a model of {} layers of {}", cv->n_layer, cv->n_embd,
                            cfg_.n_layer, cfg_.n_embd));
  if (cv && (shard_.split() || shard_.pipelined() || shard_.experts_split()))
    throw Error("control vectors do not run under --parallel yet");
  cvec_ = std::move(cv);
}

// The layers in two halves of the rows, each half's sums in flight while
// the other half computes: attention of half 1 hides the sum of half 0's
// attention, and so on through the FFNs and into the next layer. Half 1's
// attention reads the keys half 0 wrote in the same layer just before.
void LayerStack::run_layers_overlapped(const Batch& b, const BatchPlacement& place, KvStore& kv, int64_t r0,
                                       int64_t n) {
  const int64_t dim = cfg_.n_embd;
  const int64_t first[2] = {r0, r0 + n / 2}, rows[2] = {n / 2, n - n / 2};
  const Act x[2] = {x_ + first[0] * state_dim(), x_ + first[1] * state_dim()};
  const Act y[2] = {y_ + first[0] * dim, y_ + first[1] * dim};
  TensorShard::PendingSum attn[2], ffn_sum[2];
  for (int l = first_; l < end_; l++) {
    be_.annotate_layer(l);
    for (int h = 0; h < 2; h++) {
      if (l > first_) {
        TensorShard::finish(ffn_sum[h]);
        residual(l - 1, Branch::Ffn, x[h], y[h], first[h], rows[h]);
      }
      progress();
      attention(rows_of(b, place, kv, l, first[h], rows[h]), y[h]);
      attn[h] = shard_.start_sum(comm(y[h], rows[h] * dim), rows[h] * dim, false);
    }
    for (int h = 0; h < 2; h++) {
      TensorShard::finish(attn[h]);
      residual(l, Branch::Attention, x[h], y[h], first[h], rows[h]);
      progress();
      ffn(rows_of(b, place, kv, l, first[h], rows[h]), y[h]);
      ffn_sum[h] = shard_.start_ffn_sum(comm(y[h], rows[h] * dim), rows[h], dim, moe_layer(l), combine_[h].get(),
                                        touched());
    }
  }
  for (int h = 0; h < 2; h++) {
    TensorShard::finish(ffn_sum[h]);
    residual(end_ - 1, Branch::Ffn, x[h], y[h], first[h], rows[h]);
  }
}

void LayerStack::progress() {
  shard_.progress();
  for (auto& combine : combine_)
    if (combine) combine->progress();
}

}  // namespace kestrel

#include "model/mla_attention.h"

#include <cmath>

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "formats/block_formats.h"
#include "ops/hadamard.h"
#include "ops/lightning_indexer.h"

namespace kestrel {

MlaHeads split_mla_heads(const ModelConfig& c, const TensorShard& shard) {
  MlaHeads h;
  h.n = static_cast<int>(shard.share(c.n_head, "attention heads"));
  h.h0 = shard.rank * h.n;
  return h;
}

KvLayout mla_kv_layout(const ModelConfig& c, int n_layers) {
  const int64_t width = c.mla.kv_lora_rank + c.mla.qk_rope;
  // Values are the first kv_lora_rank elements of each key row: groups must divide both (and the
  // indexer key, the V row, when there is one).
  const int64_t idx = c.mla.indexer.n_head > 0 ? c.mla.indexer.head_dim : 0;
  int64_t granule = std::gcd(width, static_cast<int64_t>(c.mla.kv_lora_rank));
  if (idx > 0) granule = std::gcd(granule, idx);
  return {n_layers, width, idx, granule};
}

int indexer_rotation_size(int head_dim) {
  if (head_dim <= 0 || head_dim % 64 != 0) return 0;
  int n = 64;
  while (head_dim % (2 * n) == 0) n *= 2;
  return n;
}

namespace {

// [rows][cols] of w (any format) transposed into f32 [cols][rows].
std::vector<float> transpose_f32(const Weight& w) {
  const int64_t rows = w.rows(), cols = w.cols();
  std::vector<float> row(static_cast<size_t>(cols)), out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; r++) {
    dequantize_row(w.type, w.row(r), row.data(), cols);
    for (int64_t c = 0; c < cols; c++) out[c * rows + r] = row[c];
  }
  return out;
}

Weight f32_weight(const std::string& name, const std::vector<float>& data, int64_t cols, int64_t rows) {
  return Weight{name, GgmlType::F32, {cols, rows}, data.data(), data.size() * sizeof(float), nullptr, nullptr};
}

// The per-head key/value up-projections, from the split attn_k_b + attn_v_b
// (llama.cpp's conversions since 2025) or the older fused attn_kv_b.
void load_kv_b(const WeightLoader& ld, Backend& be, const std::string& p, const ModelConfig& c, const MlaHeads& heads,
               MlaWeights& w) {
  const MlaConfig& m = c.mla;
  const int nh = c.n_head;
  const int64_t r = m.kv_lora_rank;
  const Weight k_b = ld.optional(p + "attn_k_b.weight", {m.qk_nope, r, nh});
  if (k_b.present()) {
    // Conversions that split attn_kv_b may keep it too: the same numbers.
    ld.skip(p + "attn_kv_b.weight", "the split attn_k_b / attn_v_b hold the same weights");
    const Weight v_b = ld.require(p + "attn_v_b.weight", {r, m.v_head, nh});
    for (int h = heads.h0; h < heads.h0 + heads.n; h++) {  // this rank's heads
      const std::string tag = fmt::format(".{}", h);
      const Weight kh = weight_slice(k_b, h, k_b.name + tag);
      w.k_absorb.push_back(be.prepare_weight(kh));
      w.owned.push_back(transpose_f32(kh));
      w.k_decompress.push_back(f32_weight(k_b.name + tag + ".T", w.owned.back(), r, m.qk_nope));
      w.v.push_back(be.prepare_weight(weight_slice(v_b, h, v_b.name + tag)));
    }
  } else {
    // attn_kv_b: per head, nope key rows then v_head value rows, each kv_lora long.
    const int64_t per_head = m.qk_nope + m.v_head;
    const Weight kv_b = ld.require(p + "attn_kv_b.weight", {r, nh * per_head});
    for (int h = heads.h0; h < heads.h0 + heads.n; h++) {  // this rank's heads
      const std::string tag = fmt::format(".{}", h);
      const Weight kh = weight_rows(kv_b, h * per_head, m.qk_nope, kv_b.name + ".k" + tag);
      w.k_decompress.push_back(be.prepare_weight(kh));
      w.owned.push_back(transpose_f32(kh));
      w.k_absorb.push_back(f32_weight(kv_b.name + ".k" + tag + ".T", w.owned.back(), m.qk_nope, r));
      w.v.push_back(be.prepare_weight(weight_rows(kv_b, h * per_head + m.qk_nope, m.v_head, kv_b.name + ".v" + tag)));
    }
  }
}

}  // namespace

MlaWeights load_mla(const WeightLoader& ld, Backend& be, const std::string& p, const ModelConfig& c,
                    const MlaHeads& heads, const TensorShard& shard, bool indexer) {
  const MlaConfig& m = c.mla;
  const int64_t dim = c.n_embd, nh = c.n_head, hk = m.qk_nope + m.qk_rope;
  MlaWeights w;
  if (m.q_lora_rank > 0) {
    w.wq_a = be.prepare_weight(ld.require(p + "attn_q_a.weight", {dim, m.q_lora_rank}));
    w.q_a_norm = ld.require_vector(p + "attn_q_a_norm.weight", m.q_lora_rank);
    w.wq_b = be.prepare_weight(shard.rows(ld.require(p + "attn_q_b.weight", {m.q_lora_rank, nh * hk})));
  } else {
    w.wq = be.prepare_weight(shard.rows(ld.require(p + "attn_q.weight", {dim, nh * hk})));
  }
  w.wkv_a = be.prepare_weight(ld.require(p + "attn_kv_a_mqa.weight", {dim, m.kv_lora_rank + m.qk_rope}));
  w.kv_a_norm = ld.require_vector(p + "attn_kv_a_norm.weight", m.kv_lora_rank);
  load_kv_b(ld, be, p, c, heads, w);
  w.wo = be.prepare_weight(shard.columns(ld.require(p + "attn_output.weight", {nh * m.v_head, dim})));
  const MlaConfig::Indexer& ix = m.indexer;
  if (ix.n_head > 0 && !indexer) {
    ld.skip_prefix(p + "indexer.", "this block has no indexer of its own (an MTP block attends densely, a shared-"
                                   "indexer layer reuses the previous selection), as in llama.cpp's graphs");
  } else if (ix.n_head > 0) {
    // Every rank scores with the whole indexer: the selection is per token, not per head.
    w.idx_q_b = be.prepare_weight(ld.require(p + "indexer.attn_q_b.weight", {m.q_lora_rank, ix.n_head * ix.head_dim}));
    w.idx_k = be.prepare_weight(ld.require(p + "indexer.attn_k.weight", {dim, ix.head_dim}));
    w.idx_proj = be.prepare_weight(ld.require(p + "indexer.proj.weight", {dim, ix.n_head}));
    w.idx_k_norm = ld.require_vector(p + "indexer.k_norm.weight", ix.head_dim);
    w.idx_k_norm_b = ld.require_vector(p + "indexer.k_norm.bias", ix.head_dim);
  }
  return w;
}

MlaBlock::MlaBlock(Backend& be, const ModelConfig& c, const MlaHeads& heads, MlaAttention mode, int64_t n)
    : c_(c), heads_(heads), mode_(mode) {
  const MlaConfig& m = c.mla;
  const int64_t nh = heads.n;
  kv_width_ = m.kv_lora_rank + m.qk_rope;
  q_ = ActBuffer(be, n * nh * head_k());
  q_a_ = ActBuffer(be, n * std::max(1, m.q_lora_rank));
  q_a_norm_ = ActBuffer(be, n * std::max(1, m.q_lora_rank));
  kv_a_ = ActBuffer(be, n * kv_width_);
  lat_ = ActBuffer(be, n * m.kv_lora_rank);
  lat_norm_ = ActBuffer(be, n * m.kv_lora_rank);
  kv_rows_ = ActBuffer(be, n * kv_width_);
  q_abs_ = ActBuffer(be, n * nh * kv_width_);
  att_lat_ = ActBuffer(be, n * nh * m.kv_lora_rank);
  att_ = ActBuffer(be, n * nh * m.v_head);
  seq_tokens_.reserve(static_cast<size_t>(n));
  const MlaConfig::Indexer& ix = m.indexer;
  if (ix.n_head > 0) {
    const int64_t qw = int64_t{ix.n_head} * ix.head_dim;
    iq_ = ActBuffer(be, n * qw);
    ik_ = ActBuffer(be, n * ix.head_dim);
    iw_ = ActBuffer(be, n * ix.n_head);
    hadamard_block_ = indexer_rotation_size(ix.head_dim);
    idx_rope_ = c.rope;
    idx_rope_.style = ix.rope_style;  // on the first qk_rope dims of [rope | rest] heads
    selected_.resize(static_cast<size_t>(n) * ix.top_k);
    counts_.resize(static_cast<size_t>(n));
    sel_rows_ = ActBuffer(be, int64_t{ix.top_k} * kv_width_);
  }
}

const char* MlaBlock::mode_name() const {
  return mode_ == MlaAttention::Auto       ? "absorbed or decompressed per step by cost"
         : mode_ == MlaAttention::Absorbed ? "absorbed"
                                           : "decompressed";
}

// Multiply-adds of each way of attending this batch (per layer; weights
// and shapes as above): absorbed reads the latent once per query head,
// decompressed first rebuilds every position's keys and values.
void MlaBlock::begin_step(const Batch& b, const BatchPlacement& place) {
  // Rows past the indexer's top_k attend to their selection, absorbed; so does the rest of their step.
  const int top_k = c_.mla.indexer.n_head > 0 ? c_.mla.indexer.top_k : 0;
  if (top_k > 0 && std::any_of(b.positions.begin(), b.positions.end(), [&](int32_t p) { return p + 1 > top_k; })) {
    decompress_ = false;
    return;
  }
  if (mode_ != MlaAttention::Auto) {
    decompress_ = mode_ == MlaAttention::Decompressed;
    return;
  }
  const MlaConfig& m = c_.mla;
  const auto& tables = place.tables[0];
  const double nh = heads_.n, r = m.kv_lora_rank, hk = head_k();
  double absorbed = 0, decompressed = 0;
  for (int64_t i = 0; i < b.size(); i++) {
    const double keys = b.positions[i] + 1;
    absorbed += keys * nh * (2 * r + m.qk_rope) + nh * r * (m.qk_nope + m.v_head);
    decompressed += keys * nh * (hk + m.v_head);
    // Each sequence rebuilds its positions once: count it at its longest token.
    bool longest = true;
    for (int64_t j = 0; j < b.size() && longest; j++)
      if (j != i && tables[j] == tables[i])
        longest = b.positions[j] < b.positions[i] || (b.positions[j] == b.positions[i] && j > i);
    if (longest) decompressed += (b.positions[i] + 1) * nh * r * (m.qk_nope + m.v_head);
  }
  decompress_ = decompressed < absorbed;
}

void MlaBlock::run(Backend& be, const MlaWeights& w, const LayerRows& r, Act xb, Act out) {
  project_qkv(be, w, r, xb);
  // Rows within the first top_k positions attend to all of them: only a row past it selects, and only
  // then are the indexer's queries and its scan wanted (a prefill of the first top_k tokens skips both).
  const int top_k = c_.mla.indexer.top_k;
  const bool selects = w.indexed() && std::any_of(r.positions(), r.positions() + r.n, [&](int32_t p) { return p + 1 > top_k; });
  if (w.indexed()) index_keys(be, w, r, xb, selects);
  write_latents(be, w, r, w.indexed() ? Act(ik_) : Act());
  sparse_rows_.clear();
  if (selects) {
    select_positions(be, r);
  } else if (w.indexed()) {
    split_rows(r);  // every row dense
  } else if (r.layer < c_.n_layer && c_.mla.indexer.shares(r.layer)) {
    split_rows(r);  // the rows keep the positions the previous full layer chose for them
  }
  if (decompress_)
    attend_decompressed(be, w, r);
  else
    attend_absorbed(be, w, r);
  be.matmul(w.wo, att_, r.n, out);
}

// The indexer's query heads, key and head weights of the rows (the key written beside the latent next).
void MlaBlock::index_keys(Backend& be, const MlaWeights& w, const LayerRows& r, Act xb, bool queries) {
  const MlaConfig::Indexer& ix = c_.mla.indexer;
  const int64_t n = r.n, qw = int64_t{ix.n_head} * ix.head_dim;
  if (queries) {
    be.matmul(w.idx_q_b, q_a_norm_, n, iq_);
    const Weight* ws[2] = {&w.idx_k, &w.idx_proj};
    const Act ys[2] = {ik_, iw_};
    be.matmul_many(ws, 2, xb, n, ys);
  } else {
    be.matmul(w.idx_k, xb, n, ik_);
  }
  be.layernorm(ik_, w.idx_k_norm.data(), w.idx_k_norm_b.data(), ik_, n, ix.head_dim, 1e-6f);  // llama.cpp's f_norm_eps
  be.rope(ik_, r.positions(), n, 1, ix.head_dim, idx_rope_);
  // llama.cpp's orthonormal Walsh-Hadamard rotation of each block of the heads: q.k unchanged in exact
  // arithmetic, the rounding (and a quantized cache's scales) as llama.cpp's.
  ops::hadamard(be, {ik_, n * ix.head_dim, hadamard_block_});
  if (!queries) return;
  be.rope(iq_, r.positions(), n, ix.n_head, ix.head_dim, idx_rope_);
  ops::hadamard(be, {iq_, n * qw, hadamard_block_});
  be.scale(iw_, n * ix.n_head, 1.0f / std::sqrt(static_cast<float>(ix.head_dim * ix.n_head)));
}

// Each row's positions: all of them below top_k, else the indexer's top_k (with this step's keys cached).
void MlaBlock::select_positions(Backend& be, const LayerRows& r) {
  const MlaConfig::Indexer& ix = c_.mla.indexer;
  const PagedKvLayerView keys = r.kv.layer_view(r.kv_layer).values_as_keys();
  // Kept by the rows' places in the batch (a layer may run on part of the batch at a time).
  ops::indexer_top_k(be, {keys, {r.n, iq_, Act(), r.positions(), r.tables()}, iw_, {ix.n_head, ix.head_dim, ix.top_k},
                          selected_.data() + r.r0 * ix.top_k, counts_.data() + r.r0});
  split_rows(r);
}

// The rows past top_k positions (attending to a selection) apart from the rest.
void MlaBlock::split_rows(const LayerRows& r) {
  dense_rows_.clear();
  sparse_rows_.clear();
  for (int64_t t = 0; t < r.n; t++)
    (r.positions()[t] + 1 > c_.mla.indexer.top_k ? sparse_rows_ : dense_rows_).push_back(t);
}

// q [n][n_head][nope | rope] and kv_a [n][kv_lora | rope], RoPE applied.
void MlaBlock::project_qkv(Backend& be, const MlaWeights& w, const LayerRows& r, Act xb) {
  const MlaConfig& m = c_.mla;
  const int64_t n = r.n;
  if (w.wq.present()) {
    const Weight* ws[2] = {&w.wq, &w.wkv_a};
    const Act ys[2] = {q_, kv_a_};
    be.matmul_many(ws, 2, xb, n, ys);
  } else {
    const Weight* ws[2] = {&w.wq_a, &w.wkv_a};
    const Act ys[2] = {q_a_, kv_a_};
    be.matmul_many(ws, 2, xb, n, ys);
    be.rmsnorm(q_a_, w.q_a_norm.data(), q_a_norm_, n, m.q_lora_rank, c_.rms_eps);
    be.matmul(w.wq_b, q_a_norm_, n, q_);
  }
  // The rotary parts sit at the end of each query head and of the kv_a row.
  be.rope(q_ + m.qk_nope, r.positions(), n, heads_.n, head_k(), c_.rope);
  be.rope(kv_a_ + m.kv_lora_rank, r.positions(), n, 1, static_cast<int>(kv_width_), c_.rope);
}

// n tokens' query rows (width floats from q, stride apart) times their positions' temperatures.
void MlaBlock::apply_temperature(Backend& be, const int32_t* positions, int64_t n, Act q, int64_t stride,
                                 int64_t width) {
  if (!c_.query_temp.on()) return;
  for (int64_t i = 0; i < n; i++) be.scale(q + i * stride, width, c_.query_temp.at(positions[i]));
}

// kv[slot] = [rmsnorm(c) | k_pe] (and the indexer key, when given, in the slot's V row)
void MlaBlock::write_latents(Backend& be, const MlaWeights& w, const LayerRows& r, Act idx_keys) {
  const int64_t lr = c_.mla.kv_lora_rank, n = r.n, kw = kv_width_;
  be.copy(lat_, lr, kv_a_, kw, n, lr);
  be.rmsnorm(lat_, w.kv_a_norm.data(), lat_norm_, n, lr, c_.rms_eps);
  be.copy(kv_rows_, kw, lat_norm_, lr, n, lr);
  be.copy(kv_rows_ + lr, kw, kv_a_ + lr, kw, n, c_.mla.qk_rope);
  be.write_kv(r.kv.layer_write(r.kv_layer), r.slots(), n, kv_rows_, idx_keys);
}

namespace {
PagedKvLayerView latent_view(const KvStore& kv, int layer) {
  PagedKvLayerView v = kv.layer_view(layer);
  v.v = v.k;  // values: the first kv_lora floats of each key row
  v.v_stride = v.k_stride;
  v.v_format = v.k_format;
  return v;
}
}  // namespace

// Query per head: [Wk_b,h . q_nope,h | q_pe,h]
void MlaBlock::absorb_queries(Backend& be, const MlaWeights& w, const LayerRows& r) {
  const MlaConfig& m = c_.mla;
  const int nh = heads_.n, hk = head_k();
  const int64_t lr = m.kv_lora_rank, kw = kv_width_, n = r.n;
  be.matmul_heads(w.k_absorb.data(), nh, q_, nh * hk, hk, n, q_abs_, nh * kw, kw);
  be.copy(q_abs_ + lr, kw, q_ + m.qk_nope, hk, n * nh, m.qk_rope);
  apply_temperature(be, r.positions(), n, q_abs_, nh * kw, nh * kw);  // where llama.cpp scales: the absorbed query
}

void MlaBlock::attend_absorbed(Backend& be, const MlaWeights& w, const LayerRows& r) {
  const MlaConfig& m = c_.mla;
  const int nh = heads_.n;
  const int64_t lr = m.kv_lora_rank, kw = kv_width_, n = r.n;
  absorb_queries(be, w, r);
  const AttentionShape shape{nh, 1, static_cast<int>(kw), c_.attn_scale, static_cast<int>(lr)};
  if (sparse_rows_.empty()) {
    be.attention(latent_view(r.kv, r.kv_layer), {n, q_abs_, att_lat_, r.positions(), r.tables()}, shape);
  } else if (!dense_rows_.empty()) {
    // The rows that see every earlier position, gathered, attend as usual.
    const auto nd = static_cast<int64_t>(dense_rows_.size());
    sub_q_.ensure(be, nd * nh * kw);
    sub_out_.ensure(be, nd * nh * lr);
    sub_pos_.resize(static_cast<size_t>(nd));
    sub_tables_.resize(static_cast<size_t>(nd));
    for (int64_t i = 0; i < nd; i++) {
      sub_pos_[i] = r.positions()[dense_rows_[i]];
      sub_tables_[i] = r.tables()[dense_rows_[i]];
    }
    be.gather_rows(sub_q_, q_abs_, dense_rows_.data(), nd, nh * kw);
    be.attention(latent_view(r.kv, r.kv_layer), {nd, sub_q_, sub_out_, sub_pos_.data(), sub_tables_.data()}, shape);
    be.scatter_rows(att_lat_, sub_out_, dense_rows_.data(), nd, nh * lr);
  }
  if (!sparse_rows_.empty()) attend_sparse(be, r);
  // Out of the latent per head: Wv_b,h . o_h
  be.matmul_heads(w.v.data(), nh, att_lat_, nh * lr, lr, n, att_, nh * m.v_head, m.v_head);
}

// Each row past top_k over its selected positions only: their latent rows gathered, then attention over
// them all (the selection holds only positions at or before the row's own).
void MlaBlock::attend_sparse(Backend& be, const LayerRows& r) {
  const int nh = heads_.n, top_k = c_.mla.indexer.top_k;
  const int64_t lr = c_.mla.kv_lora_rank, kw = kv_width_;
  const AttentionShape shape{nh, 1, static_cast<int>(kw), c_.attn_scale, static_cast<int>(lr)};
  const PagedKvLayerView view = latent_view(r.kv, r.kv_layer);
  for (const int64_t t : sparse_rows_) {
    const int64_t row = r.r0 + t;
    const int32_t count = counts_[row], last = count - 1;
    be.gather_kv_rows(view, r.tables()[t], selected_.data() + row * top_k, count, kw, sel_rows_);
    be.attention_dense(sel_rows_, sel_rows_, kw, kw, count,
                       {1, q_abs_ + t * nh * kw, att_lat_ + t * nh * lr, &last, nullptr}, shape);
  }
}

// Per sequence of the rows: rebuild keys and values of all its positions
// up to its last one among them, then multi-head attention over them.
void MlaBlock::attend_decompressed(Backend& be, const MlaWeights& w, const LayerRows& r) {
  const int32_t* const* tables = r.tables();
  for (int64_t first = 0; first < r.n; first++) {
    // Each sequence once, at its first token.
    bool seen = false;
    for (int64_t j = 0; j < first && !seen; j++) seen = tables[j] == tables[first];
    if (!seen) attend_sequence(be, w, r, tables[first]);
  }
}

void MlaBlock::attend_sequence(Backend& be, const MlaWeights& w, const LayerRows& r, const int32_t* table) {
  const MlaConfig& m = c_.mla;
  const int nh = heads_.n, hk = head_k(), vh = m.v_head;
  const int64_t lr = m.kv_lora_rank, kw = kv_width_;
  const int32_t* const* tables = r.tables();
  const int32_t* positions = r.positions();
  // Its tokens, in batch order, and the positions they reach.
  auto& tokens = seq_tokens_;
  tokens.clear();
  for (int64_t j = 0; j < r.n; j++)
    if (tables[j] == table) tokens.push_back(j);
  int32_t len = 0;
  for (int64_t i : tokens) len = std::max(len, positions[i] + 1);
  dec_rows_.ensure(be, int64_t{len} * kw);
  dec_lat_.ensure(be, int64_t{len} * lr);
  dec_k_.ensure(be, int64_t{len} * nh * hk);
  dec_v_.ensure(be, int64_t{len} * nh * vh);
  // Keys [Wk_b,h^T c | k_pe] and values Wv_b,h c of every position, from the cached latent rows.
  be.read_kv_rows(r.kv.layer_view(r.kv_layer), table, len, kw, dec_rows_);
  be.copy(dec_lat_, lr, dec_rows_, kw, len, lr);
  for (int h = 0; h < nh; h++) be.copy(dec_k_ + h * hk + m.qk_nope, nh * hk, dec_rows_ + lr, kw, len, m.qk_rope);
  be.matmul_heads(w.k_decompress.data(), nh, dec_lat_, lr, 0, len, dec_k_, nh * hk, hk);
  be.matmul_heads(w.v.data(), nh, dec_lat_, lr, 0, len, dec_v_, nh * vh, vh);
  // This sequence's queries, contiguous, over every position.
  const auto nt = static_cast<int64_t>(tokens.size());
  dec_q_.ensure(be, nt * nh * hk);
  dec_out_.ensure(be, nt * nh * vh);
  dec_pos_.resize(static_cast<size_t>(nt));
  for (int64_t j = 0; j < nt; j++) dec_pos_[j] = positions[tokens[j]];
  be.gather_rows(dec_q_, q_, tokens.data(), nt, nh * hk);
  apply_temperature(be, dec_pos_.data(), nt, dec_q_, nh * hk, nh * hk);
  be.attention_dense(dec_k_, dec_v_, nh * hk, nh * vh, len, {nt, dec_q_, dec_out_, dec_pos_.data(), nullptr},
                     {nh, nh, hk, c_.attn_scale, vh});
  be.scatter_rows(att_, dec_out_, tokens.data(), nt, nh * vh);
}

}  // namespace kestrel

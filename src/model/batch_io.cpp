#include "model/batch_io.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace kestrel {

namespace {

void check_batch_rows(const Batch& b, const PagedKvCache& kv, int64_t n_vocab) {
  for (int64_t i = 0; i < b.size(); i++) {
    if (b.tokens[i] < 0 || b.tokens[i] >= n_vocab)
      throw Error(fmt::format("token id {} is outside the vocabulary (0..{})", b.tokens[i], n_vocab - 1));
    if (b.positions[i] < 0 || b.positions[i] >= kv.length(b.seq_ids[i]))
      throw Error(fmt::format("position {} of sequence {} has no KV slot: the scheduler allocates before a forward step "
                              "(the sequence holds {} positions)",
                              b.positions[i], b.seq_ids[i], kv.length(b.seq_ids[i])));
  }
}

}  // namespace

void place_batch(const Batch& b, const PagedKvCache& kv, int64_t n_vocab, BatchPlacement& out) {
  check_batch_rows(b, kv, n_vocab);
  for (int g = 0; g < kv.n_groups(); g++)
    for (int64_t i = 0; i < b.size(); i++) {
      out.slots[g][i] = kv.slot(b.seq_ids[i], b.positions[i], g);
      out.tables[g][i] = kv.block_table(b.seq_ids[i], g);
    }
  if (kv.blocks().n_state_slots() > 0)
    for (int64_t i = 0; i < b.size(); i++) out.state_slots[i] = kv.blocks().state_slot(b.seq_ids[i]);
}

IoWeights load_io_weights(const WeightLoader& ld, Backend& be, const ModelConfig& c, bool with_head,
                          bool with_embedding) {
  IoWeights w;
  if (with_embedding) w.tok_embd = ld.require("token_embd.weight", {c.n_embd, c.n_vocab});
  else ld.skip("token_embd.weight", "pipeline parallelism: stage 0 embeds");
  w.output_norm = ld.require_vector("output_norm.weight", c.n_embd);
  if (!with_head) {
    if (!c.tied_output || !with_embedding) ld.skip("output.weight", "tensor parallelism: only the leader rank samples");
    return w;
  }
  w.output = be.prepare_weight(c.tied_output ? w.tok_embd : ld.require("output.weight", {c.n_embd, c.n_vocab}));
  return w;
}

void output_logits(Backend& be, const Batch& b, Act x, int64_t dim, const float* norm, float eps, const Weight& output,
                   Act scratch, Act logits, float* hidden, const BestOut* best) {
  if (hidden) {
    be.annotate_layer(-1);
    const Act h = be.host_view(hidden);
    be.rmsnorm(x, norm, h, b.size(), dim, eps);
    be.read(h, hidden, b.size() * dim);
  }
  if (!logits && !best) return;
  thread_local std::vector<int64_t> rows;  // grown once to the largest batch
  rows.clear();
  for (int64_t i = 0; i < b.size(); i++)
    if (b.want_logits[i]) rows.push_back(i);
  if (rows.empty()) return;
  const auto n = static_cast<int64_t>(rows.size());
  be.gather_rows(x, x, rows.data(), n, dim);  // to the front, in place
  be.annotate_layer(-1);
  be.rmsnorm(x, norm, scratch, n, dim, eps);
  if (!best) {
    be.annotate_rows(rows.data(), 0, n);
    return be.matmul(output, scratch, n, logits);
  }
  for (int64_t r0 = 0; r0 < n; r0 += best->chunk) {
    const int64_t m = std::min(best->chunk, n - r0);
    be.annotate_rows(rows.data(), r0, m);
    be.matmul(output, scratch + r0 * dim, m, best->rows);
    if (best->softcap > 0.0f) be.softcap(best->rows, m * output.rows(), best->softcap);
    if (best->k == 1)
      be.argmax_rows(best->rows, m, output.rows(), best->ids + r0);
    else
      be.top_k_rows(best->rows, m, output.rows(), best->k, best->ids + r0 * best->k, best->vals + r0 * best->k);
  }
}

}  // namespace kestrel

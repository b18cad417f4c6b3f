#include "model/batch_io.h"

#include <fmt/format.h>

#include <cstring>

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

void output_logits(Backend& be, const Batch& b, float* x, int64_t dim, const float* norm, float eps,
                   const Weight& output, float* scratch, float* logits, float* hidden) {
  if (hidden) {
    be.annotate_layer(-1);
    be.rmsnorm(x, norm, hidden, b.size(), dim, eps);
  }
  int64_t rows = 0;
  for (int64_t i = 0; i < b.size(); i++) {
    if (!b.want_logits[i]) continue;
    if (rows != i) std::memcpy(x + rows * dim, x + i * dim, dim * sizeof(float));
    rows++;
  }
  if (rows == 0) return;
  be.annotate_layer(-1);
  be.rmsnorm(x, norm, scratch, rows, dim, eps);
  be.matmul(output, scratch, rows, logits);
}

}  // namespace kestrel

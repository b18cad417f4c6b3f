#include "model/batch_io.h"

#include <fmt/format.h>

#include <cstring>

#include "core/error.h"

namespace kestrel {

void place_batch(const Batch& b, PagedKvCache& kv, int64_t n_vocab, int64_t* slots, const int32_t** tables) {
  const int64_t n = b.size();
  for (int64_t i = 0; i < n; i++) {
    if (b.tokens[i] < 0 || b.tokens[i] >= n_vocab)
      throw Error(fmt::format("token id {} is outside the vocabulary (0..{})", b.tokens[i], n_vocab - 1));
    if (kv.length(b.seq_ids[i]) < b.positions[i] + 1) kv.reserve(b.seq_ids[i], b.positions[i] + 1);
  }
  for (int64_t i = 0; i < n; i++) {
    slots[i] = kv.slot(b.seq_ids[i], b.positions[i]);
    tables[i] = kv.block_table(b.seq_ids[i]);
  }
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

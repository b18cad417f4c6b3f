#pragma once
// A forward step's input: a list of (sequence, token, position) rows and which
// rows need logits. Prefill, decode and verification are all just batches.
#include <cstdint>
#include <vector>

namespace kestrel {

struct Batch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;
  std::vector<int32_t> seq_ids;
  std::vector<uint8_t> want_logits;
  // Every logits row is wanted only for its argmax (greedy sampling with nothing that reads the row: set only
  // where Model::argmax_on_device()): forward() then writes, over the front of its logits buffer, one int32
  // per logits row — the row's argmax (kernels/ops.h's rule) — and the rows themselves stay on the backend.
  bool argmax_only = false;

  void add(int32_t token, int32_t pos, int32_t seq, bool logits) {
    tokens.push_back(token);
    positions.push_back(pos);
    seq_ids.push_back(seq);
    want_logits.push_back(logits ? 1 : 0);
  }
  void clear() {
    tokens.clear();
    positions.clear();
    seq_ids.clear();
    want_logits.clear();
    argmax_only = false;
  }
  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
  int64_t n_logit_rows() const {
    int64_t n = 0;
    for (auto w : want_logits) n += w;
    return n;
  }
};

// Where a batch's rows live in the paged KV cache, per layer group (the
// full-attention layers, then the sliding-window ones): each row's slot and
// its sequence's block table. model/batch_io.h fills it from the cache; a
// tensor-parallel rank gets it from its leader.
struct BatchPlacement {
  std::vector<int64_t> slots[2];
  std::vector<const int32_t*> tables[2];
  std::vector<int32_t> state_slots;  // each row's sequence's recurrent-state slot (-1: the model has none)
  explicit BatchPlacement(int64_t max_tokens) : state_slots(static_cast<size_t>(max_tokens), -1) {
    for (int g = 0; g < 2; g++) slots[g].resize(max_tokens), tables[g].resize(max_tokens);
  }
};

}  // namespace kestrel

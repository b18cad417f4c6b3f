#pragma once
// A forward step's input: a list of (sequence, token, position) rows and which
// rows need logits. Prefill, decode and verification are all just batches.
#include <cstdint>
#include <vector>

namespace kestrel {

struct LoraSet;  // model/lora.h

struct Batch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;
  std::vector<int32_t> seq_ids;
  std::vector<uint8_t> want_logits;
  // > 0: every logits row is wanted only for its `best` best candidates (sampling with nothing else reading the
  // row; set only where Model::best_on_device()). forward() then writes no logits rows (they stay on the
  // backend) but, for logits row r, `best` ids at best_ids + r * best and, best > 1, their logits at best_vals +
  // r * best (buffers of the caller's, each n_logit_rows() * best long): 1, the row's argmax (kernels/ops.h's
  // rule); more, its top-k (ops.h top_k's order).
  int32_t best = 0;
  int32_t* best_ids = nullptr;
  float* best_vals = nullptr;
  // Rows fed an input row instead of a token's embedding (media: an encoder's output, mmproj/mmproj.h): row
  // embd_rows[i] takes embd[i * width, (i + 1) * width), the model's input width, unscaled (Gemma scales only
  // token embeddings, as llama.cpp does). Their tokens are placeholders the model never looks up.
  std::vector<int64_t> embd_rows;
  std::vector<float> embd;
  // Empty: causal attention. Else per row the last position it attends to (at least its own): a media span
  // whose rows see each other both ways (Gemma 3's images) gives each of its rows the span's last position.
  std::vector<int32_t> horizons;
  // Empty: each row turns (RoPE) by its position. Else (M-RoPE: ModelConfig::rope_sections, a Qwen3.5 image in a
  // sequence) three planes of size() rows: the temporal, height and width rotary positions of every row. An
  // image's rows take (t, t + row, t + column) of its grid, and the positions after it advance by the grid's
  // longer side rather than its rows (llama.cpp's mtmd M-RoPE layout); text rows carry one position thrice.
  std::vector<int32_t> rope_pos;
  // Empty: no LoRA adapter. Else per row the index of its request's adapter set in lora_sets (-1: none): a
  // model loaded with adapters (model/lora_backend.h) adds each set's updates on its rows.
  std::vector<int32_t> lora_rows;
  std::vector<const LoraSet*> lora_sets;

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
    best = 0;
    best_ids = nullptr;
    best_vals = nullptr;
    embd_rows.clear();
    embd.clear();
    horizons.clear();
    rope_pos.clear();
    lora_rows.clear();
    lora_sets.clear();
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

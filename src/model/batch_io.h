#pragma once
// The two ends of every architecture's forward step that do not depend on
// the architecture: placing a batch's tokens in the paged KV cache (where
// the scheduler allocated them), and the output head over only the rows that
// asked for logits.
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/model.h"
#include "model/weight_loader.h"
#include "model/batch.h"
#include "kv/kv_cache.h"

namespace kestrel {

// Checks every token id against the vocabulary and every position against
// what its sequence holds (Error naming the bad one: the scheduler must have
// allocated it), and fills each row's slot and its sequence's block table for
// every layer group of the cache (full-attention and sliding-window layers).
void place_batch(const Batch& b, const PagedKvCache& kv, int64_t n_vocab, BatchPlacement& out);

// The two ends' weights: the token embedding, and the output head (its norm
// and matrix; a tied head is the embedding, given its own prepared copy so
// that the lookup keeps reading the file's rows). Without with_head (a
// tensor-parallel rank that never samples) the head is skipped, without
// with_embedding (a later pipeline stage) the embedding.
struct IoWeights {
  Weight tok_embd, output;
  std::vector<float> output_norm;
};
IoWeights load_io_weights(const WeightLoader& ld, Backend& be, const ModelConfig& c, bool with_head = true,
                          bool with_embedding = true);

// Steps that sample from the best candidates (Batch::best): the head's rows go `chunk` at a time into `rows`
// (chunk * n_vocab floats on the backend), are soft-capped there (softcap > 0) and only their best k come back
// (k 1: the argmax, to ids; more: the top-k, k ids and k logits per row).
struct BestOut {
  Act rows;
  int64_t chunk;
  float softcap;
  int k;
  int32_t* ids;
  float* vals;
};

// Moves the rows of x that want logits to the front, then
// logits = rmsnorm(rows, norm) . output (skipped when logits is empty and
// there is no best); scratch holds rows * dim floats. With hidden set, first
// rmsnorm(x, norm) of every row into that host memory. With best, the
// rows' best candidates instead of logits (BestOut).
void output_logits(Backend& be, const Batch& b, Act x, int64_t dim, const float* norm, float eps, const Weight& output,
                   Act scratch, Act logits, float* hidden = nullptr, const BestOut* best = nullptr);

}  // namespace kestrel

#pragma once
// The rows of a step that one layer's branch runs on, with where they live
// in the paged KV cache: what every block (GQA or MLA attention, FFN, MoE)
// takes from the layer stack (model/layer_stack.h).
#include <cstdint>

#include "kv/kv_store.h"
#include "model/batch.h"

namespace kestrel {

struct LayerRows {
  const Batch& batch;
  const BatchPlacement& place;
  KvStore& kv;
  int layer;     // the layer's index in the model (for its RoPE, window, weights)
  int kv_layer;  // its place in this rank's cache (this stage's layers only, then any MTP layer)
  int64_t r0;    // rows [r0, r0 + n) of the batch
  int64_t n;

  const int32_t* positions() const { return batch.positions.data() + r0; }
  // Each row's last visible position (null: causal; model/batch.h's horizons).
  const int32_t* horizons() const { return batch.horizons.empty() ? nullptr : batch.horizons.data() + r0; }
  // Plane s (0 temporal, 1 height, 2 width) of the rows' rotary positions, or null: they turn by positions()
  // (model/batch.h's rope_pos).
  const int32_t* rope_positions(int s) const {
    return batch.rope_pos.empty() ? nullptr : batch.rope_pos.data() + s * batch.size() + r0;
  }
  // The cache's layer group of this layer (full attention, or sliding window).
  int group() const { return kv.group_of(kv_layer); }
  const int64_t* slots() const { return place.slots[group()].data() + r0; }
  const int32_t* const* tables() const { return place.tables[group()].data() + r0; }
};

}  // namespace kestrel

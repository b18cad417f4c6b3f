#pragma once
// What one token's KV takes in each layer: widths, storage types and the
// sliding-window layers. The architecture decides (per-head K and V for
// Llama, a latent vector for MLA); the cache is sized from it.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/kv_format.h"

namespace kestrel {

struct KvLayout {
  int n_layer = 0;
  int64_t k_width = 0;  // elements per token per layer
  int64_t v_width = 0;
  int64_t granule = 1;  // attention reads rows in pieces at multiples of this (the head size)
  KvType k_type = KvType::F32, v_type = KvType::F32;
  // The V rows hold state kept in float32 whatever --kv-type asks (a layout whose V rows are not values: e.g.
  // DeepSeek-V4's compressors' per-token state): only k_type follows the choice.
  bool v_f32_only = false;
  // Sliding-window layers (sliding[l] set) attend over the last
  // sliding_window positions; empty or window 0: none.
  int32_t sliding_window = 0;
  std::vector<uint8_t> sliding = {};
  // The store's two groups may hold rows of their own shapes: the sliding group's widths when they differ
  // from the full group's (-1: the same), and the full group's positions per row (the row of position p is
  // p / full_row_stride; it must divide the KV block size). (DeepSeek-V4 uses both: raw keys and compressor
  // state in the sliding group, a compressed key per 4 positions in the full one.)
  int64_t sliding_k_width = -1, sliding_v_width = -1;
  int32_t full_row_stride = 1;
  // Recurrent layers (linear attention: Qwen3.5's Gated DeltaNet) beside the n_layer attention layers above:
  // each keeps per sequence a state of state_floats float32 that does not grow with the context, in the
  // sequence's state slot (BlockManager), and a checkpoint of it (StateMark) for rollbacks.
  int n_recurrent = 0;
  int64_t state_floats = 0;
  // Bytes of one sequence's recurrent state over all recurrent layers, its checkpoint and a prefix snapshot
  // (as many snapshots as sequences) included.
  int64_t state_bytes_per_seq() const { return 3 * static_cast<int64_t>(n_recurrent) * state_floats * 4; }

  KvRowFormat k_format() const { return KvRowFormat(k_type, granule); }
  KvRowFormat v_format() const { return KvRowFormat(v_type, granule); }
  bool is_sliding(int layer) const {
    return sliding_window > 0 && layer < static_cast<int>(sliding.size()) && sliding[layer];
  }
  int n_sliding() const {
    int n = 0;
    for (int l = 0; l < n_layer; l++) n += is_sliding(l);
    return n;
  }
  // Whether the groups' rows differ (widths or positions per row): then the sliding layers cannot join the
  // full group, even where the window covers the whole context.
  bool groups_differ() const { return sliding_k_width >= 0 || sliding_v_width >= 0 || full_row_stride > 1; }
  // A layer group's row widths (0: full attention, 1: sliding window).
  int64_t k_width_in(int group) const { return group == 1 && sliding_k_width >= 0 ? sliding_k_width : k_width; }
  int64_t v_width_in(int group) const { return group == 1 && sliding_v_width >= 0 ? sliding_v_width : v_width; }
  // Bytes of K and V one token takes in one layer of a group.
  int64_t bytes_per_layer_token(int group = 0) const {
    return static_cast<int64_t>(k_format().bytes(k_width_in(group)) + v_format().bytes(v_width_in(group)));
  }
  // ... in all the sliding layers (what only a window holds).
  int64_t sliding_bytes_per_token() const { return n_sliding() * bytes_per_layer_token(1); }
  // Bytes of K and V one token takes over all layers (sliding ones included).
  int64_t bytes_per_token() const { return full_bytes_per_token() + sliding_bytes_per_token(); }
  // ... over the full-attention layers only: what grows with the context.
  int64_t full_bytes_per_token() const { return (n_layer - n_sliding()) * bytes_per_layer_token(0) / full_row_stride; }
  // "64.0 KiB/token", or with sliding layers what grows with the context
  // and what only a window holds: "16.0 KiB/token + 48.0 KiB/token over the last 4096"; with recurrent
  // layers "+ 12.5 MiB/sequence of recurrent state".
  std::string describe_bytes() const;
  // Tokens of context whose KV fits in `bytes` (one sequence; sliding layers
  // hold at most their window); -1: unbounded (every layer slides).
  int64_t tokens_in(int64_t bytes) const;
  // "q8_0", or "q8_0/q4" when keys and values differ.
  std::string type_name() const {
    return k_type == v_type || v_width == 0 ? kv_type_name(k_type)
                                            : std::string(kv_type_name(k_type)) + "/" + kv_type_name(v_type);
  }
};

}  // namespace kestrel

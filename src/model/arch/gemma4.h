#pragma once
// Gemma 4's own configuration and synth shape (model/arch/gemma4.cpp has the math): what no other family has,
// reached through ModelConfig::family and SynthShape::family (model/family_part.h).
#include <cstdint>
#include <vector>

#include "model/family_part.h"
#include "model/model.h"
#include "model/synth.h"

namespace kestrel {

// Gemma 4 (`gemma4`, model/arch/gemma4.cpp): layers of two shapes, caches shared by the last layers,
// per-layer embeddings. ModelConfig's head_dim and n_head_kv are the full-attention layers'.
struct Gemma4Config {
  int head_dim_sliding = 0, n_head_kv_sliding = 0;  // the sliding-window layers' (0: not Gemma 4)
  std::vector<int64_t> n_ff;  // each layer's FFN width (twice the others' on E2B's KV-sharing layers)
  // Layers [0, n_kv_layers) keep a cache; each later one reads the cache of the last of those of its own kind
  // (sliding or full): llama.cpp's n_layer_kv_from_start.
  int n_kv_layers = 0;
  int64_t per_layer = 0;  // per-layer embedding width (0: none)
  bool on() const { return head_dim_sliding > 0; }
  bool keeps_kv(int layer) const { return layer < n_kv_layers; }
  int kv_source(int layer, bool sliding) const {
    return keeps_kv(layer) ? layer : n_kv_layers - (sliding ? 2 : 1);
  }
};

// Gemma 4's extras (gemma4): the shape's head_dim and kv_heads are the sliding layers'.
struct SynthGemma4 {
  int64_t head_dim_full = 0, kv_heads_full = 0;  // the full-attention layers'
  int64_t period = 6;                  // every period-th layer full (the last of each run of period)
  int64_t shared_kv = 0;               // the last layers, reading earlier layers' caches
  int64_t per_layer = 0;               // per-layer embedding width (0: none)
  float rope_partial_full = 0.25f;     // the full layers' rotated share (rope_freqs)
  bool k_eq_v = false;                 // full layers without attn_v (the keys' projection is the values')
  bool double_wide = false;            // the shared-KV layers' FFN twice feed_forward_length (E2B)
};

inline const Gemma4Config& gemma4_config(const ModelConfig& c) { return family_part<Gemma4Config>(c.family); }
inline const SynthGemma4& synth_gemma4(const SynthShape& s) { return family_part<SynthGemma4>(s.family); }

}  // namespace kestrel

#pragma once
// DeepSeek-V4's own configuration and synth shape (model/arch/deepseek4.cpp has the math): what no other
// family has, reached through ModelConfig::family and SynthShape::family (model/family_part.h).
#include <cstdint>
#include <vector>

#include "kernels/ops.h"
#include "model/family_part.h"
#include "model/model.h"
#include "model/synth.h"

namespace kestrel {

// DeepSeek-V4 (`deepseek4`, model/arch/deepseek4.cpp): hyper-connections and compressed attention.
struct Dsv4Config {
  int hc = 0;  // residual streams per token (hyper_connection.count); 0: not V4
  int sinkhorn_iters = 0;
  float hc_eps = 0;
  int q_lora = 0;                 // the queries' bottleneck
  int window = 0;                 // raw keys each query sees (attention.sliding_window)
  int o_groups = 0, o_lora = 0;   // grouped low-rank output projection
  std::vector<int> ratios;        // per trunk layer: 0 (window only), 4 (indexed blocks) or 128 (every block)
  RopeParams rope_compress;       // the compressing layers' RoPE (and their indexer's)
  int idx_heads = 0, idx_dim = 0, idx_top_k = 0;  // the lightning indexer of the ratio-4 layers
  int hash_layers = 0;            // leading layers whose experts the token id picks
  std::vector<float> clamp_exp, clamp_shexp;  // per layer SwiGLU limits of routed / shared experts
};

// DeepSeek-V4's extras (deepseek4); the experts, YaRN and q_lora come from SynthDeepseek.
struct SynthDsv4 {
  int64_t head_dim = 0, rope_dims = 0, window = 0, o_groups = 0, o_lora = 0;
  int64_t hc = 4, sinkhorn = 20, hash_layers = 0;
  float hc_eps = 1e-6f, swiglu_limit = 10.0f, compress_base = 160000.0f;
  std::vector<int64_t> ratios;  // per layer: 0, 4 or 128
};

inline const Dsv4Config& dsv4_config(const ModelConfig& c) { return family_part<Dsv4Config>(c.family); }
inline const SynthDsv4& synth_dsv4(const SynthShape& s) { return family_part<SynthDsv4>(s.family); }

}  // namespace kestrel

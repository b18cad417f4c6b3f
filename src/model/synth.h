#pragma once
// Random-weight models of a chosen architecture and shape, for tests and
// benchmarks when real weights are not at hand.
#include <cstdint>
#include <string>

#include "core/ggml_types.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"

namespace kestrel {

// DeepSeek-V2/V3 extras (arch deepseek2): MLA sizes, MoE layout, YaRN.
struct SynthDeepseek {
  int64_t q_lora = 0, kv_lora = 0, qk_nope = 0, qk_rope = 0, v_head = 0;
  int64_t dense_lead = 1, experts = 0, experts_used = 0, experts_shared = 0, ffn_expert = 0;
  int64_t groups = 1, groups_used = 1;
  bool sigmoid = false, selection_bias = false, norm_weights = false;
  float weights_scale = 1.0f;
  float yarn_factor = 0.0f;  // 0: no YaRN
  int64_t yarn_orig_ctx = 0;
  float yarn_log_mul = 0.1f;
  int64_t nextn = 0;  // multi-token-prediction blocks after the trunk (DeepSeek-V3 has 1)
};

struct SynthShape {
  std::string arch = "llama";  // llama | qwen2 | deepseek2
  int64_t dim = 0, layers = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0, ctx = 0;
  SynthDeepseek ds;  // deepseek2 only
};

// Presets: llama/qwen2: tiny, 1b (TinyLlama 1.1B shape), 7b (Llama-2-7B shape).
// deepseek2: tiny (V2-Lite-like: no query compression, softmax routing),
// tiny-v3 (V3-like: query compression, sigmoid routing with bias in groups,
// YaRN), lite (DeepSeek-V2-Lite's shape, 15.7B), v3-small (V3's layout at
// dim 1024: 64 experts in 8 groups), v3 (DeepSeek-V3's shape, 671B: use
// --layers). Throws for others.
SynthShape synth_preset(const std::string& arch, const std::string& preset);

struct SynthOptions {
  SynthShape shape;
  GgmlType type = GgmlType::F16;
  uint64_t seed = 1;
  const GgufFile* vocab_from = nullptr;  // copy this tokenizer (its size sets the vocab)
  int n_threads = 1;
  std::string name = "kestrel-synth";
};

// Checks the shape and returns a writer that generates each tensor as it is
// written (deterministic for a seed, whatever the thread count).
GgufWriter synth_model(const SynthOptions& options);

}  // namespace kestrel

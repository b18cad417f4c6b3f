#pragma once
// Random-weight models of a chosen architecture and shape, for tests and
// benchmarks when real weights are not at hand.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "formats/ggml_types.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"

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

// The decoder families' extras (model/decoder_model.cpp); what each
// architecture's tensors look like follows from `arch`.
struct SynthDecoder {
  int64_t head_dim = 0;     // 0: dim / heads (Qwen3 and Gemma set their own)
  bool tied = false;        // no output.weight: the embedding is the output head
  float rope_base = 10000;
  // Llama 3.x: rope_freqs.weight from the converter's llama3 rule (factor,
  // low 1, high 4, original context); Gemma 3's global layers: linear scaling.
  float rope_factor = 0;
  int64_t rope_orig_ctx = 0;
  int64_t window = 0;       // sliding window (Gemma 2/3, Phi-3)
  // Experts: Mixtral (llama), Qwen2-MoE (with a gated shared expert), Qwen3-MoE.
  int64_t experts = 0, experts_used = 0, ffn_expert = 0, ffn_shared = 0;
};

struct SynthShape {
  std::string arch = "llama";  // llama | qwen2 | qwen2moe | qwen3 | qwen3moe | phi3 | gemma2 | gemma3 | deepseek2
  int64_t dim = 0, layers = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0, ctx = 0;
  SynthDeepseek ds;  // deepseek2 only
  SynthDecoder dec;  // the others
};

// The architectures synth writes and their presets (real models' shapes),
// "tiny" first: e.g. qwen3: tiny, 0.6b, 4b.
const std::vector<std::pair<std::string, std::vector<std::string>>>& synth_presets();
// Throws naming the known presets for an unknown (arch, preset).
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

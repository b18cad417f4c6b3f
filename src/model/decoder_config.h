#pragma once
// The hyperparameters every decoder-only family shares, read from a GGUF's
// `{arch}.*` keys with llama.cpp's names and defaults. The architecture files
// (model/arch/*.cpp) start from these and add what is theirs.
#include <cstdint>
#include <string>

#include "model/hparams_reader.h"
#include "model/model.h"

namespace kestrel {

// Sizes, norm epsilon, heads, RoPE (base, rotated dims, linear or YaRN
// scaling, attn_factor) and whether the output head is tied.
ModelConfig read_decoder_basics(HparamReader& h, RopeStyle rope_style);

// Routed experts: expert_count / expert_used_count, softmax gating (the
// families here all use it), the experts' FFN width.
void read_routed_experts(HparamReader& h, ModelConfig& c, int64_t n_ff_expert, bool normalize);

// Sliding-window layers: layer l slides when l % pattern < pattern - 1
// (llama.cpp's swa pattern: 2 = every other layer from the first, 6 = five
// local then one global; 1 = every layer).
void set_sliding_layers(ModelConfig& c, int32_t window, int pattern);

}  // namespace kestrel

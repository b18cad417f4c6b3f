#pragma once
// The hyperparameters the families share, read from a GGUF's `{arch}.*` keys
// with llama.cpp's names and defaults. A family's file (model/arch/) reads
// through these and adds what is its own.
#include <cstdint>
#include <string>

#include "model/hparams_reader.h"
#include "model/model.h"

namespace kestrel {

struct CommonDefaults {
  double rms_eps = 1e-5;  // attention.layer_norm_rms_epsilon when the file has none
  int64_t n_ctx = 2048;   // context_length likewise
  // The family may carry multi-token-prediction blocks after its trunk
  // (nextn_predict_layers, counted in block_count: DeepSeek-V3).
  bool mtp_blocks = false;
  // feed_forward_length may be absent (0): every layer has experts and the key describes no tensor.
  bool ffn_optional = false;
  // feed_forward_length may be one per layer (an array, Gemma 4): n_ff is then blk.0's, the family reads the rest.
  bool ffn_per_layer = false;
};

// What every family has: the embedding width, its blocks, attention heads,
// FFN width, context, norm epsilon, the vocabulary (the embedding's rows)
// and whether the output head is tied to the embedding; the embedding width
// and block count checked against the file's tensors.
ModelConfig read_common(HparamReader& h, const CommonDefaults& d = {});

// Grouped-query attention's heads: head_count_kv (dividing the heads),
// key_length (the head size, default n_embd / n_head) and an equal
// value_length; checked against blk.0's q and k projections.
void read_gqa_heads(HparamReader& h, ModelConfig& c);

// RoPE of the style given over rope.dimension_count dims (default: the head
// size): its base, linear or YaRN scaling (`rope.scaling.*`), attn_factor.
void read_rope(HparamReader& h, ModelConfig& c, RopeStyle style);

// YaRN's keys beyond the factor: the original context and the ramp's betas,
// set on rope (whose freq_scale is already 1 / factor).
void read_yarn(HparamReader& h, ModelConfig& c, RopeParams& rope);

// The common sizes, GQA heads and RoPE: what a Llama-derived family starts from.
ModelConfig read_decoder_basics(HparamReader& h, RopeStyle rope_style);

// expert_count and expert_used_count (which must fit in it).
void read_expert_counts(HparamReader& h, ModelConfig& c);

// Routed experts with softmax gating (expert_gating_func, when present, must
// say so), chosen weights renormalised or not, each expert n_ff_expert wide.
void read_routed_experts(HparamReader& h, ModelConfig& c, int64_t n_ff_expert, bool normalize);

// Sliding-window layers: layer l slides when l % pattern < pattern - 1
// (llama.cpp's swa pattern: 2 = every other layer from the first, 6 = five
// local then one global; 1 = every layer).
void set_sliding_layers(ModelConfig& c, int32_t window, int pattern);

}  // namespace kestrel

#pragma once
// Each architecture's entry, defined in its own file here; model/families.cpp
// lists them in one table.
#include "model/batch_io.h"
#include "model/family.h"
#include "model/layer_stack.h"
#include "model/weight_loader.h"

namespace kestrel {

const Family& llama_family();
const Family& qwen2_family();
const Family& qwen2moe_family();
const Family& qwen3_family();
const Family& qwen3moe_family();
const Family& phi3_family();
const Family& gemma2_family();
const Family& gemma3_family();
const Family& deepseek2_family();
const Family& mistral4_family();
const Family& deepseek32_family();
const Family& glm_dsa_family();
const Family& deepseek4_family();
const Family& gpt_oss_family();
const Family& mistral3_family();
const Family& glm4moe_family();
const Family& llama4_family();
const Family& gemma4_family();
const Family& qwen3next_family();
const Family& qwen35_family();
const Family& qwen35moe_family();

// DeepSeek Sparse Attention's parts (deepseek32.cpp), shared with glm-dsa: the three
// attention.indexer.* keys (and the query bottleneck they need) into c.mla.indexer; and in synth those
// keys plus the indexer tensors of the blocks marked in `layers` (trunk, then MTP).
void read_dsa_indexer(HparamReader& h, ModelConfig& c);
void synth_dsa_indexer(SynthFile& out, const std::vector<uint8_t>& layers);

// DeepSeekMoE's keys (deepseek2.cpp), shared with deepseek4: the expert counts and widths (routed and
// shared), the weights' scale (0: none) and renormalisation; in synth those keys and the gating function.
void read_deepseek_experts(HparamReader& h, ModelConfig& c);
void synth_deepseek_experts(SynthFile& out, ExpertGating gating);

}  // namespace kestrel

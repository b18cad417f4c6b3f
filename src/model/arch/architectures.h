#pragma once
// The decoder-only families Kestrel runs through model/decoder_model.cpp. Each
// file here reads its family's hyperparameters (what makes it differ from a
// plain Llama layer) from the GGUF; the layer itself is written once.
#include "model/hparams_reader.h"
#include "model/model.h"

namespace kestrel {

ModelConfig read_llama_arch(HparamReader& h, const ModelOptions& o);     // Llama 1-3, Mistral, Mixtral
ModelConfig read_qwen2_arch(HparamReader& h, const ModelOptions& o);     // Qwen2, Qwen2.5, R1-Distill-Qwen
ModelConfig read_qwen2moe_arch(HparamReader& h, const ModelOptions& o);  // Qwen1.5-MoE, Qwen2-57B-A14B
ModelConfig read_qwen3_arch(HparamReader& h, const ModelOptions& o);     // Qwen3 dense
ModelConfig read_qwen3moe_arch(HparamReader& h, const ModelOptions& o);  // Qwen3-30B-A3B, 235B-A22B
ModelConfig read_phi3_arch(HparamReader& h, const ModelOptions& o);      // Phi-3, Phi-3.5-mini, Phi-4-mini
ModelConfig read_gemma2_arch(HparamReader& h, const ModelOptions& o);    // Gemma 2
ModelConfig read_gemma3_arch(HparamReader& h, const ModelOptions& o);    // Gemma 3 (text)

}  // namespace kestrel

#pragma once
#include <memory>

#include "model/model.h"

namespace kestrel {

// Llama-family decoder (Llama 1/2/3, DeepSeek-LLM/Coder, TinyLlama, Mistral)
// and Qwen2 (the same layer plus q/k/v biases and NeoX RoPE).
std::unique_ptr<Model> make_llama_model(const GgufFile& file, Backend& backend, const ModelOptions& options);

}  // namespace kestrel

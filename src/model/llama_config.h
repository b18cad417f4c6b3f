#pragma once
#include "model/gguf.h"
#include "model/model.h"

namespace kestrel {

// Hyperparameters of a llama/qwen2 GGUF, validated (names the bad key).
ModelConfig read_llama_config(const GgufFile& file);

}  // namespace kestrel

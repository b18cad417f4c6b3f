#pragma once
#include "gguf/gguf.h"
#include "model/model.h"

namespace kestrel {

// Hyperparameters of a GGUF `deepseek2` model (DeepSeek-V2, V2-Lite, V2.5,
// V3, R1), validated: an error names the bad or missing key.
ModelConfig read_deepseek2_config(const GgufFile& file);

}  // namespace kestrel

#pragma once
#include <memory>

#include "model/model.h"

namespace kestrel {

// DeepSeek-V2/V3/R1 (GGUF `deepseek2`): multi-head latent attention over a
// latent KV cache and DeepSeekMoE feed-forward layers.
// config: read_deepseek2_config's (load_model reads it once for every architecture).
std::unique_ptr<Model> make_deepseek2_model(const GgufFile& file, Backend& backend, const ModelOptions& options,
                                            ModelConfig config);

}  // namespace kestrel

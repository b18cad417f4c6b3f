#pragma once
#include <memory>

#include "model/model.h"

namespace kestrel {

// The decoder of the Llama-derived families (model/decoder_model.cpp), with
// the hyperparameters an architecture file read (model/arch/).
std::unique_ptr<Model> make_decoder_model(const GgufFile& file, Backend& backend, const ModelOptions& options,
                                          ModelConfig config);

}  // namespace kestrel

#pragma once
// What one token costs a model: bytes of weights streamed per decoded token
// and arithmetic per prompt token. The rooflines divide the machine's
// measured limits by these.
#include <cstdint>
#include <string>

#include "formats/ggml_types.h"
#include "gguf/gguf.h"
#include "model/model.h"

namespace kestrel {

struct ModelCost {
  int64_t n_params = 0;             // all tensors
  int64_t matmul_params = 0;        // weights multiplied per token (embedding lookup excluded; MoE: routed experts only)
  int64_t weight_bytes_per_token = 0;  // weights read per decoded token (MoE: n_used of n_expert experts)
  int64_t file_bytes = 0;
  GgmlType dominant_type = GgmlType::F32;  // type holding most matmul bytes
  // 2 FLOPs per weight, plus attention over `context` earlier positions.
  double flops_per_token(const ModelConfig& c, int64_t context) const;
  std::string describe(const ModelConfig& c) const;  // "llama 1.1B Q4_0"
};

ModelCost model_cost(const GgufFile& file, const ModelConfig& config);

}  // namespace kestrel

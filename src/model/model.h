#pragma once
// The boundary between the runtime and an architecture: a Model runs one
// batched forward step over a paged KV cache and returns logits for the rows
// the batch asked for. Everything else (tokens, sampling, scheduling) is outside.
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/backend.h"
#include "kernels/ops.h"
#include "model/gguf.h"
#include "runtime/batch.h"
#include "runtime/kv_cache.h"

namespace kestrel {

struct ModelConfig {
  std::string arch;        // general.architecture
  std::string name;        // general.name
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  int64_t n_ff = 0;
  int64_t n_ctx_train = 0;
  float rms_eps = 1e-5f;
  RopeParams rope;
  bool qkv_bias = false;
  bool tied_output = false;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  virtual KvLayout kv_layout() const = 0;
  virtual int64_t max_batch_tokens() const = 0;
  // Runs the batch (reserving KV positions as needed) and writes one row of
  // n_vocab logits per row with want_logits set, in batch order.
  virtual void forward(const Batch& batch, PagedKvCache& kv, float* logits) = 0;
};

struct ModelOptions {
  int64_t max_batch_tokens = 512;
  bool log_fusion = false;  // print which fused operators are used, at load
};

// Picks the architecture from general.architecture. The GgufFile must outlive the model.
std::unique_ptr<Model> load_model(const GgufFile& file, Backend& backend, const ModelOptions& options);

}  // namespace kestrel

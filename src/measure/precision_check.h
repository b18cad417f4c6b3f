#pragma once
// The model as configured (weights as stored, float32 arithmetic, int8
// activations where the kernels use them, the KV cache type) against the
// same weights in float64 arithmetic throughout, layer by layer: the
// relative error ||ours - f64|| / ||f64|| of the queries after RoPE, the
// attention output, the attention and FFN branches as added to the residual
// stream (after Gemma's post norms), and the residual stream
// after each layer, and of the logits. A layer where the error jumps points
// at the operator losing precision. Also the error of the RoPE rotation
// (cos/sin from float32 angles) at the last position of the context.
// The decoder families and the MLA families (measure/f64_reference.h); for
// MLA the queries and the attention output are not compared (the engine
// attends over the latent, absorbed, the reference per head), the branches,
// the residual and the logits are, and with DeepSeek-V3.2's indexer each
// layer's top-k selections: how many rows chose the same positions.
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "runtime/loaded_model.h"

namespace kestrel {

struct LayerPrecision {
  int layer = 0;
  double q_rope = 0, attention = 0, attn_proj = 0, ffn = 0, residual = 0;  // NaN: not compared
  int64_t selected_rows = 0, selected_same = 0;  // indexer rows past top_k, and those equal to float64's
};

struct PrecisionReport {
  std::vector<LayerPrecision> layers;
  double logits = 0;
  int64_t n_tokens = 0;
  int64_t rope_position = 0;  // where the RoPE table error was measured
  double rope_max_error = 0;  // max |cos, sin (float32 angle) - cos, sin (float64)|
  bool indexer = false;       // some layer's attention chooses its positions (a sparse-attention indexer)
};

// Records what precision_check compares; pass it as LoadOptions::wrap_backend.
std::unique_ptr<Backend> make_activation_recorder(Backend& inner);

// Runs tokens (one sequence, one batch) through the engine, whose backend
// must be make_activation_recorder's, and through the float64 reference.
// Throws Error for other architectures or more tokens than a batch.
PrecisionReport precision_check(LoadedModel& engine, const std::vector<int32_t>& tokens);

}  // namespace kestrel

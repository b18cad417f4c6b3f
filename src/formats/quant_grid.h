#pragma once
// Re-rounding single elements of an already encoded block while keeping the
// block's scales: what GPTQ needs, which fixes a block's scales once and then
// rounds its columns one at a time, folding each rounding error into the
// columns not yet rounded. For Q8_0, Q4_0, Q4_K, Q5_K, Q6_K and FP8.
#include <cstdint>

#include "formats/ggml_types.h"

namespace kestrel {

bool has_quant_grid(GgmlType type);

// Element j (0 .. block size - 1) of the encoded block at `block` is set to
// the grid point nearest w; returns that point's value.
float snap_to_grid(GgmlType type, void* block, int j, float w);

}  // namespace kestrel

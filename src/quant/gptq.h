#pragma once
// GPTQ (Frantar et al., 2022): a matrix quantized column by column, each
// column's rounding error spread over the columns not yet quantized in
// proportion to the inverse Hessian of the layer's squared output error,
// H = XᵀX over calibration inputs X. Blocks keep GGUF's layouts: when a row
// reaches a new block, the block's scales are chosen from the row's current
// (already compensated) values, then its elements are rounded on that grid
// one at a time (quant_grid.h). Rows are independent given H, so they run in
// parallel.
#include <cstdint>
#include <vector>

#include "formats/ggml_types.h"

namespace kestrel {

struct GptqOptions {
  double damp = 0.01;  // added to H's diagonal, as a fraction of its mean diagonal
  int n_threads = 1;
};

// w: rows x cols floats, overwritten with the quantized values; out: the
// encoded rows (row_bytes(type, cols) each). xtx: cols x cols. Throws Error
// when the type has no grid (quant_grid.h) or H is not positive definite
// even after damping.
void gptq_quantize(GgmlType type, float* w, int64_t rows, int64_t cols, const std::vector<double>& xtx,
                   const GptqOptions& options, uint8_t* out);

}  // namespace kestrel

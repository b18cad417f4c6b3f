#pragma once
// Tiled matrix multiply for float weight formats (F32, F16, BF16) against
// float activations: 4 weight rows x 4 tokens per micro-kernel on AVX-512
// (16 FMAs per 8 loads; 4 x 3 on AVX2, whose 16 registers hold 12
// accumulators), one horizontal sum per output at the end. Used when a batch
// has several tokens; single tokens use the row dots.
#include <cstddef>
#include <cstdint>

#include "formats/ggml_types.h"
#include "hw/cpu_features.h"

namespace kestrel {

// y[t * ldy + r] for rows [r0, r1), tokens [0, n); x is [n][cols].
struct FloatTiles {
  const char* isa;
  void (*gemm)(GgmlType wtype, const uint8_t* w, size_t row_stride, int64_t cols, int64_t r0, int64_t r1,
               const float* x, int64_t n, float* y, int64_t ldy, int64_t token_chunk);
  // BF16 weights against activations rounded to BF16 (as floats), every output bit-identical to this ISA's
  // row dot (dot_bf16_f32, ggml's order) but with each widened weight vector serving several tokens; null
  // where the ISA has none (AVX2 has).
  void (*bf16_in_dot_order)(const uint8_t* w, size_t row_stride, int64_t cols, int64_t r0, int64_t r1,
                            const float* x, int64_t n, float* y, int64_t ldy, int64_t token_chunk) = nullptr;
  // BF16 batches as llama.cpp computes them (llamafile's tinyBLAS: one accumulator per output over the
  // vector width, a horizontal sum at the end), for weights whose rows are a multiple of 4 and columns of
  // the vector width (ggml's conditions; else it takes the row dots); null where the ISA has none.
  void (*bf16_ggml_batches)(const uint8_t* w, size_t row_stride, int64_t cols, int64_t r0, int64_t r1,
                            const float* x, int64_t n, float* y, int64_t ldy, int64_t token_chunk) = nullptr;
  int64_t bf16_ggml_width = 0;  // the vector width those columns must be a multiple of
};
// The table when compiled in and the CPU runs it at this ISA level (isa_dispatch.h), else null.
const FloatTiles* float_tiles(IsaLevel isa = selected_isa());

}  // namespace kestrel

#pragma once
// Tiled matrix multiply for float weight formats (F32, F16, BF16) against
// float activations: 5 weight rows x 5 tokens per micro-kernel on AVX-512
// (25 FMAs per 10 loads, 25 of the 32 registers accumulating; 4 x 3 on AVX2,
// whose 16 registers hold 12 accumulators), one horizontal sum per output at
// the end: llama.cpp's GEMM order for batches (the tile's shape changes no bit). Used for batches of matrices llama.cpp hands to that
// GEMM; single tokens, routed experts and other shapes use the row dots.
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
  // The vector width whose steps `gemm` sums in: each output is then what llama.cpp's GEMM for batches
  // (llamafile's tinyBLAS, one accumulator per output, a horizontal sum at the end) gives for a matrix whose
  // rows are a multiple of 4 and columns of this width (ggml's conditions for it).
  int64_t ggml_width = 0;
};
// The table when compiled in and the CPU runs it at this ISA level (isa_dispatch.h), else null.
const FloatTiles* float_tiles(IsaLevel isa = selected_isa());

}  // namespace kestrel

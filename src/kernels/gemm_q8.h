#pragma once
// Tiled int8 matrix multiply for Q8_0/Q4_0 weights against Q8_0 activations:
// 4 weight rows x up to 4 tokens per micro-kernel, so every weight load is
// used for several tokens and every activation load for several rows.
//
// Each (row, token) dot keeps ggml's exact arithmetic: eight int32 lanes per
// block, each the sum of 4 products, scaled by d_w*d_x and accumulated with
// FMA block after block, then summed across lanes at the end. So results are
// bit-identical to the one-row dot kernels and to llama.cpp.
#include <cstddef>
#include <cstdint>

#include "formats/block_formats.h"
#include "formats/ggml_types.h"
#include "hw/cpu_features.h"

namespace kestrel {

struct QuantizedActivations {
  const BlockQ8_0* blocks = nullptr;  // [n_tokens][n_blocks]
  const int32_t* lane_sums = nullptr; // [n_tokens][n_blocks][8]: sum of each 4-byte group
  int64_t n_tokens = 0, n_blocks = 0;
};

// The AVX-512 VNNI int8 tiles (8 rows x 4 tokens) over Q8_0/Q4_0 weights in
// the file's layout: lane_sums once per call (the sums of each 4-byte group
// of the activations), then gemm over any row range.
struct Int8Tiles {
  const char* isa;
  void (*lane_sums)(const BlockQ8_0* x, int64_t n_blocks_total, int32_t* lane_sums);
  void (*gemm)(GgmlType wtype, const uint8_t* w, size_t row_stride, int64_t r0, int64_t r1,
               const QuantizedActivations& x, float* y, int64_t ldy, int64_t token_chunk);
};
// The table when compiled in and the CPU runs it at this ISA level (isa_dispatch.h), else null.
const Int8Tiles* int8_tiles(IsaLevel isa = selected_isa());

}  // namespace kestrel

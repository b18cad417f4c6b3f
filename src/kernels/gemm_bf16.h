#pragma once
// BF16 weights against activations rounded to BF16, with the AVX-512 BF16
// dot instruction (vdpbf16ps: 32 products per instruction, summed into 16
// f32 lanes): twice the f32 FMA rate. Rounding the activations to BF16 is
// what llama.cpp does for BF16 weights too, and each output is summed in
// llama.cpp's order for it, which depends on the call: its row dot's for
// single tokens and routed experts (ggml's AVX512-BF16 vec_dot: two
// accumulators over 64-element steps, each reduced and summed in double;
// 4 rows x 3 tokens per micro-kernel), its GEMM's for the batches of any
// other matrix whose rows are a multiple of 4 and columns of 32 (llamafile's
// tinyBLAS: one accumulator over 32-element steps, _mm512_reduce_add_ps;
// 4 rows x 6 tokens). With activations at 8 bits of mantissa another order
// flips roundings downstream (the Gemma 2 BF16 compat cell left llama.cpp's
// ids at step 14 with a one-accumulator order for everything).
#include <cstddef>
#include <cstdint>

#include "hw/cpu_features.h"

namespace kestrel {

struct Bf16Tiles {
  const char* isa;
  // dst[i] = x[i] rounded to BF16 (nearest even), n floats.
  void (*convert)(const float* x, uint16_t* dst, int64_t n);
  // y[t * ldy + r] for rows [r0, r1) and tokens [0, n); w: BF16 rows of `cols`
  // (row_stride bytes apart), x: [n][cols] BF16.
  void (*gemm)(const uint8_t* w, size_t row_stride, int64_t cols, int64_t r0, int64_t r1, const uint16_t* x,
               int64_t n, float* y, int64_t ldy, int64_t token_chunk);
  // The same in llama.cpp's GEMM order (cols a multiple of gemm_width).
  void (*gemm_ggml_order)(const uint8_t* w, size_t row_stride, int64_t cols, int64_t r0, int64_t r1,
                          const uint16_t* x, int64_t n, float* y, int64_t ldy, int64_t token_chunk);
  int64_t gemm_width;
};
// The table when compiled in and the CPU runs it at this ISA level (isa_dispatch.h), else null.
const Bf16Tiles* bf16_tiles(IsaLevel isa = selected_isa());

}  // namespace kestrel

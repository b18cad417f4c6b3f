#pragma once
// BF16 weights against activations rounded to BF16, with the AVX-512 BF16
// dot instruction (vdpbf16ps: 32 products per instruction, summed into 16
// f32 lanes): twice the f32 FMA rate. Rounding the activations to BF16 is
// what llama.cpp does for BF16 weights too. 4 rows x 4 tokens per
// micro-kernel, one horizontal sum per output.
#include <cstddef>
#include <cstdint>

namespace kestrel {

bool gemm_bf16_available();  // compiled in and the CPU has AVX-512 BF16

// dst[i] = x[i] rounded to BF16 (nearest even), n floats. Needs gemm_bf16_available().
void convert_to_bf16(const float* x, uint16_t* dst, int64_t n);

// y[t * ldy + r] for rows [r0, r1) and tokens [0, n); w: BF16 rows of `cols`
// (row_stride bytes apart), x: [n][cols] BF16. Needs gemm_bf16_available().
void gemm_bf16(const uint8_t* w, size_t row_stride, int64_t cols, int64_t r0, int64_t r1, const uint16_t* x, int64_t n,
               float* y, int64_t ldy, int64_t token_chunk = 64);

}  // namespace kestrel

#pragma once
// Row-dot-product kernels, one per (weight format, activation format), in a
// table chosen once per process by ISA. The scalar table is the reference that
// every SIMD table is tested against.
#include <cstdint>

#include "formats/block_formats.h"
#include "hw/cpu_features.h"

namespace kestrel {

struct DotKernels {
  IsaLevel isa;
  float (*dot_f32)(const float* w, const float* x, int64_t n);
  float (*dot_f16_f32)(const uint16_t* w, const float* x, int64_t n);
  float (*dot_bf16_f32)(const uint16_t* w, const float* x, int64_t n);
  // Quantized weights meet activations quantized to Q8_0 (as ggml does).
  float (*dot_q8_0_q8_0)(const BlockQ8_0* w, const BlockQ8_0* x, int64_t n);
  float (*dot_q4_0_q8_0)(const BlockQ4_0* w, const BlockQ8_0* x, int64_t n);
  // Activation quantizer (round half to even, like ggml's run-time path).
  void (*quantize_q8_0)(const float* x, BlockQ8_0* y, int64_t n);
  // y[i] += a * x[i] (attention's weighted sum of values).
  void (*axpy_f32)(float* y, float a, const float* x, int64_t n);
  // x[i] = exp(x[i] - m), returning the sum (attention's softmax numerators).
  // SIMD versions use a polynomial exp accurate to a few ulp.
  float (*exp_sum_f32)(float* x, float m, int64_t n);
  // dot_f16_f32 of a row shorter than this (> 0) is its SIMD loop's tail only: each product rounded to float,
  // summed in double from 0 (ggml's leftover loop), so rows of that length may be summed several at a time in
  // the same order (matmul_kernels.cpp: a LoRA's B, rank columns). 0: no such shortcut (the scalar table sums in
  // float).
  int64_t f16_double_tail_below = 0;
  // The same for rows [0, rows) of such a matrix (stride elements apart) into y: the sums in that order, several
  // rows at once (null: the generic loop of matmul_kernels.cpp).
  void (*dot_f16_short_rows)(const uint16_t* w, int64_t stride, int64_t rows, const float* x, int64_t n,
                             float* y) = nullptr;
};

const DotKernels& scalar_dot_kernels();
const DotKernels* avx2_dot_kernels();    // nullptr when not compiled in
const DotKernels* avx512_dot_kernels();  // nullptr when not compiled in
// The AVX-512 table with VNNI quantized dots (needs avx512vnni at run time).
const DotKernels* avx512vnni_dot_kernels();
// The table for an ISA level (falls back to the best one compiled in below it).
const DotKernels& dot_kernels_for(IsaLevel isa);
// The process-wide table (isa_dispatch.h: chosen once for selected_isa()).
const DotKernels& dot_kernels();

}  // namespace kestrel

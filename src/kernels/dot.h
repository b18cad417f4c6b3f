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

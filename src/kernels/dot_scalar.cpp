#include <algorithm>
#include <cmath>

#include "formats/fp16.h"
#include "kernels/isa_dispatch.h"
#include "kernels/dot.h"

namespace kestrel {
namespace {

float dot_f32(const float* w, const float* x, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; i++) sum += w[i] * x[i];
  return sum;
}

float dot_f16_f32(const uint16_t* w, const float* x, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; i++) sum += fp16_to_fp32(w[i]) * x[i];
  return sum;
}

// ggml's scalar bf16 order: each product in float, the sum in double.
float dot_bf16_f32(const uint16_t* w, const float* x, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; i++) sum += static_cast<double>(bf16_to_fp32(w[i]) * x[i]);
  return static_cast<float>(sum);
}

float dot_q8_0_q8_0(const BlockQ8_0* w, const BlockQ8_0* x, int64_t n) {
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK8_0; b++) {
    int32_t sumi = 0;
    for (int j = 0; j < kQK8_0; j++) sumi += w[b].qs[j] * x[b].qs[j];
    sum += static_cast<float>(sumi) * (fp16_to_fp32(w[b].d) * fp16_to_fp32(x[b].d));
  }
  return sum;
}

float dot_q4_0_q8_0(const BlockQ4_0* w, const BlockQ8_0* x, int64_t n) {
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK4_0; b++) {
    int32_t sumi = 0;
    for (int j = 0; j < kQK4_0 / 2; j++) {
      sumi += ((w[b].qs[j] & 0x0F) - 8) * x[b].qs[j];
      sumi += ((w[b].qs[j] >> 4) - 8) * x[b].qs[j + kQK4_0 / 2];
    }
    sum += static_cast<float>(sumi) * (fp16_to_fp32(w[b].d) * fp16_to_fp32(x[b].d));
  }
  return sum;
}

void axpy_f32(float* y, float a, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

float exp_sum_f32(float* x, float m, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; i++) sum += (x[i] = std::exp(x[i] - m));
  return sum;
}

// ggml's x86 activation quantizer (what llama.cpp's CPU builds run): the scale stored is amax / 127, the
// values multiplied by 127 / amax (not by 1 / d: the two differ in the last bit, and activations that are
// small multiples of one step, as a Q4_0/Q5_0 embedding's are, land on exact halves where that bit decides)
// and rounded half to even.
void quantize_activations_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK8_0; b++) {
    const float* p = x + b * kQK8_0;
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; j++) amax = std::max(amax, std::fabs(p[j]));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[b].d = fp32_to_fp16(amax / 127.0f);
    for (int j = 0; j < kQK8_0; j++) y[b].qs[j] = static_cast<int8_t>(std::nearbyint(p[j] * id));
  }
}

}  // namespace

const DotKernels& scalar_dot_kernels() {
  static const DotKernels k{IsaLevel::Scalar, dot_f32, dot_f16_f32, dot_bf16_f32,
                            dot_q8_0_q8_0, dot_q4_0_q8_0, quantize_activations_q8_0, axpy_f32, exp_sum_f32};
  return k;
}

#ifndef KESTREL_HAVE_AVX2_KERNELS
const DotKernels* avx2_dot_kernels() { return nullptr; }
const DotKernels* avx512_dot_kernels() { return nullptr; }
const DotKernels* avx512vnni_dot_kernels() { return nullptr; }
#endif

const DotKernels& dot_kernels_for(IsaLevel isa) {
  return best_table(isa, scalar_dot_kernels(), avx2_dot_kernels(), avx512_dot_kernels(), avx512vnni_dot_kernels());
}

const DotKernels& dot_kernels() {
  static const DotKernels& k = dot_kernels_for(selected_isa());
  return k;
}

}  // namespace kestrel

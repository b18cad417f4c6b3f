// AVX2 + FMA + F16C k-quant and FP8 dots (kquant_dot_simd.h); called only when the CPU has them.
#include <immintrin.h>

#include "kernels/kquant_dot.h"

namespace kestrel {
namespace {
#include "kernels/kquant_dot_simd.h"  // NOLINT(bugprone-suspicious-include): one ISA per TU

float dot_q4_K(const BlockQ4_K* w, const BlockQ8_K* x, int64_t n) {
  float out;
  simd_dot_k4<false, 1>(w, &x, n, &out);
  return out;
}
float dot_q5_K(const BlockQ5_K* w, const BlockQ8_K* x, int64_t n) {
  float out;
  simd_dot_k4<true, 1>(w, &x, n, &out);
  return out;
}
float dot_q6_K(const BlockQ6_K* w, const BlockQ8_K* x, int64_t n) {
  float out;
  simd_dot_q6_K<1>(w, &x, n, &out);
  return out;
}
void dot4_q4_K(const BlockQ4_K* w, const BlockQ8_K* const* x, int64_t n, float* out) {
  simd_dot_k4<false, 4>(w, x, n, out);
}
void dot4_q5_K(const BlockQ5_K* w, const BlockQ8_K* const* x, int64_t n, float* out) {
  simd_dot_k4<true, 4>(w, x, n, out);
}
void dot4_q6_K(const BlockQ6_K* w, const BlockQ8_K* const* x, int64_t n, float* out) { simd_dot_q6_K<4>(w, x, n, out); }
float dot_fp8(const BlockFp8* w, const float* x, int64_t n) { return simd_dot_fp8(w, x, n); }

}  // namespace

const KQuantDots* avx2_kquant_dots() {
  static const KQuantDots k{"avx2", dot_q4_K, dot_q5_K, dot_q6_K, dot_fp8, dot4_q4_K, dot4_q5_K, dot4_q6_K};
  return &k;
}

}  // namespace kestrel

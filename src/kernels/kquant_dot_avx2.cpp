// AVX2 + FMA + F16C k-quant and FP8 dots (kquant_dot_simd.h); called only when the CPU has them.
#include <immintrin.h>

#include "kernels/kquant_dot.h"

namespace kestrel {
namespace {
#include "kernels/kquant_dot_simd.h"  // NOLINT(bugprone-suspicious-include): one ISA per TU

float dot_q4_K(const BlockQ4_K* w, const BlockQ8_K* x, int64_t n) { return simd_dot_k4<false>(w, x, n); }
float dot_q5_K(const BlockQ5_K* w, const BlockQ8_K* x, int64_t n) { return simd_dot_k4<true>(w, x, n); }
float dot_q6_K(const BlockQ6_K* w, const BlockQ8_K* x, int64_t n) { return simd_dot_q6_K(w, x, n); }
float dot_fp8(const BlockFp8* w, const float* x, int64_t n) { return simd_dot_fp8(w, x, n); }

}  // namespace

const KQuantDots* avx2_kquant_dots() {
  static const KQuantDots k{"avx2", dot_q4_K, dot_q5_K, dot_q6_K, dot_fp8};
  return &k;
}

}  // namespace kestrel

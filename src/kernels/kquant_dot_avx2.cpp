// AVX2 + FMA + F16C k-quant and FP8 dots (kquant_dot_simd.h); called only when the CPU has them.
#include <immintrin.h>

#include "kernels/fp8_f16c.h"
#include "kernels/kquant_dot.h"

namespace kestrel {
namespace {
#include "kernels/kquant_dot_simd.h"  // NOLINT(bugprone-suspicious-include): one ISA per TU

float dot_fp8(const BlockFp8* w, const float* x, int64_t n) { return simd_dot_fp8(w, x, n); }

}  // namespace

const KQuantDots* avx2_kquant_dots() {
  static const KQuantDots k{"avx2", dot_q4_K, dot_q5_K, dot_q6_K, dot_fp8, 4, dot4_q4_K, dot4_q5_K, dot4_q6_K};
  return &k;
}

}  // namespace kestrel

// AVX2 + FMA + F16C k-quant and FP8 dots (kquant_dot_simd.h); called only when the CPU has them.
#include <immintrin.h>

#include "kernels/x86/fp8_f16c.h"
#include "kernels/kquant_dot.h"

namespace kestrel {
namespace {
#include "kernels/x86/kquant_dot_simd.h"  // NOLINT(bugprone-suspicious-include): one ISA per TU

float dot_fp8(const BlockFp8* w, const float* x, int64_t n) { return simd_dot_fp8(w, x, n); }

}  // namespace

const KQuantDots* avx2_kquant_dots() {
  // One token, and four (prefill).
  static const KQuantDots k{"avx2",
                            one_token<BlockQ4_K, simd_dot_k4<false, 1, BlockQ4_K>>,
                            one_token<BlockQ5_K, simd_dot_k4<true, 1, BlockQ5_K>>,
                            one_token<BlockQ6_K, simd_dot_q6_K<1>>,
                            dot_fp8,
                            4,
                            simd_dot_k4<false, 4, BlockQ4_K>,
                            simd_dot_k4<true, 4, BlockQ5_K>,
                            simd_dot_q6_K<4>};
  return &k;
}

}  // namespace kestrel

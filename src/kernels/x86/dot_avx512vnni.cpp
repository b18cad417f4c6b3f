// Row dots for Q8_0/Q4_0 weights with AVX-512 VNNI: two blocks per vpdpbusd,
// weights made unsigned (Q8_0: +128, Q4_0: raw nibbles) and the bias taken
// back out with the activations' lane sums, so each int32 lane is exactly
// ggml's. Scaling and accumulation stay 8 lanes wide, block after block, as
// in ggml, so results are bit-identical to the AVX2 kernels.
#include <immintrin.h>

#include "hw/cpu_features.h"
#include "kernels/x86/avx512_helpers.h"
#include "kernels/dot.h"

namespace kestrel {
namespace {

using namespace avx512;

// Software prefetch distances for streamed weight rows (read once per token),
// measured with `kestrel bench -n 64` on the 1.1B model: the hardware
// prefetcher alone left decode ~20% (Q8_0) and ~30% (Q4_0) slower.
constexpr int kPrefetchBytesQ8 = 8192;
constexpr int kPrefetchBytesQ4 = 4096;

// Blocks b and b+1 of a Q4_0 row as 64 unsigned nibbles in element order.
inline __m512i q4_two(const BlockQ4_0* w) { return q4_nibbles_two(w[0].qs, w[1].qs); }

// Sum of q*x per 4-byte lane, given u = q + bias (bias = 2^shift) as unsigned bytes.
template <int kShift>
inline __m512i lanes(__m512i u, __m512i x) {
  const __m512i xsum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), x);
  return _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), u, x), _mm512_slli_epi32(xsum, kShift));
}

float dot_q8_0_q8_0(const BlockQ8_0* w, const BlockQ8_0* x, int64_t n) {
  return row_dot(w, x, n, [](const BlockQ8_0* w2, const BlockQ8_0* x2) {
    _mm_prefetch(reinterpret_cast<const char*>(w2) + kPrefetchBytesQ8, _MM_HINT_T0);
    const __m512i u = _mm512_xor_si512(load_two(w2[0].qs, w2[1].qs), _mm512_set1_epi8(char(0x80)));
    return lanes<7>(u, load_two(x2[0].qs, x2[1].qs));
  });
}

float dot_q4_0_q8_0(const BlockQ4_0* w, const BlockQ8_0* x, int64_t n) {
  return row_dot(w, x, n, [](const BlockQ4_0* w2, const BlockQ8_0* x2) {
    _mm_prefetch(reinterpret_cast<const char*>(w2) + kPrefetchBytesQ4, _MM_HINT_T0);
    return lanes<3>(q4_two(w2), load_two(x2[0].qs, x2[1].qs));
  });
}

}  // namespace

const DotKernels* avx512vnni_dot_kernels() {
  const DotKernels* base = avx512_dot_kernels();
  static const DotKernels k{IsaLevel::Avx512, base->dot_f32, base->dot_f16_f32, base->dot_bf16_f32,
                            dot_q8_0_q8_0, dot_q4_0_q8_0, base->quantize_q8_0, base->axpy_f32, base->exp_sum_f32,
                            base->f16_double_tail_below, base->dot_f16_short_rows};
  return &k;
}

}  // namespace kestrel

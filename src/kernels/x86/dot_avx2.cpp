// AVX2 + FMA + F16C versions of the dot kernels; this file alone is compiled
// with those flags and is only called when the CPU reports them.
#include <immintrin.h>

#include <cmath>

#include "formats/fp16.h"
#include "kernels/dot.h"
#include "kernels/exp_cephes.h"

namespace kestrel {
namespace {

#include "kernels/x86/avx2_helpers.h"  // NOLINT(bugprone-suspicious-include): one ISA per TU

// Hardware fp16 -> fp32 (F16C); the portable bit-twiddling version is far slower.
inline float f16(uint16_t h) { return _cvtsh_ss(h); }

// ggml's AVX2 f32 and f16 row dots (ggml_vec_dot_f32/_f16): four accumulators over 32-element steps, its
// reduction, the rest one product at a time (f32: in float; f16: in double, as its ggml_float sum).
// ggml's four accumulators: c[k] += widen(w + i + 8k) * x[i + 8k] over whole 32-element steps; i is left at
// the first element not taken.
template <class T, class Widen>
inline void fma4_steps(const T* w, const float* x, int64_t n, int64_t& i, Widen widen, __m256 (&c)[4]) {
  for (int k = 0; k < 4; k++) c[k] = _mm256_setzero_ps();
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; k++) c[k] = _mm256_fmadd_ps(widen(w + i + 8 * k), _mm256_loadu_ps(x + i + 8 * k), c[k]);
}

float dot_f32(const float* w, const float* x, int64_t n) {
  __m256 a[4];
  int64_t i = 0;
  fma4_steps(w, x, n, i, [](const float* p) { return _mm256_loadu_ps(p); }, a);
  float sum = ggml_reduce4(a[0], a[1], a[2], a[3]);
  for (; i < n; i++) sum += w[i] * x[i];
  return sum;
}

float dot_f16_f32(const uint16_t* w, const float* x, int64_t n) {
  __m256 a[4];
  int64_t i = 0;
  fma4_steps(w, x, n, i, [](const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }, a);
  double sum = ggml_reduce4(a[0], a[1], a[2], a[3]);
  for (; i < n; i++) sum += static_cast<double>(fp16_to_fp32(w[i]) * x[i]);
  return static_cast<float>(sum);
}

// BF16 weights meet activations rounded to BF16 (Matmul's Bf16Rounded): ggml's AVX2 bf16 dot's shape,
// four accumulators over 32 elements a step summed (c1 + c3) + (c2 + c4), with FMA.
float dot_bf16_f32(const uint16_t* w, const float* x, int64_t n) {
  __m256 c[4];
  int64_t i = 0;
  fma4_steps(w, x, n, i, [](const uint16_t* p) { return widen_bf16(p); }, c);
  for (; i + 8 <= n; i += 8) c[0] = _mm256_fmadd_ps(widen_bf16(w + i), _mm256_loadu_ps(x + i), c[0]);
  float sum = hsum(_mm256_add_ps(_mm256_add_ps(c[0], c[2]), _mm256_add_ps(c[1], c[3])));
  for (; i < n; i++) sum += bf16_to_fp32(w[i]) * x[i];
  return sum;
}

// Signed int8 x int8 dot of 32 lanes, as 8 float partial sums.
inline __m256 mul_sum_i8_pairs(__m256i a, __m256i b) {
  const __m256i ax = _mm256_sign_epi8(a, a);
  const __m256i sy = _mm256_sign_epi8(b, a);
  const __m256i dot16 = _mm256_maddubs_epi16(ax, sy);
  const __m256i dot32 = _mm256_madd_epi16(dot16, _mm256_set1_epi16(1));
  return _mm256_cvtepi32_ps(dot32);
}

float dot_q8_0_q8_0(const BlockQ8_0* w, const BlockQ8_0* x, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQK8_0; b++) {
    const __m256 d = _mm256_set1_ps(f16(w[b].d) * f16(x[b].d));
    const __m256i qw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs));
    const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs));
    acc = _mm256_fmadd_ps(d, mul_sum_i8_pairs(qw, qx), acc);
  }
  return hsum(acc);
}

float dot_q4_0_q8_0(const BlockQ4_0* w, const BlockQ8_0* x, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  const __m256i low_mask = _mm256_set1_epi8(0x0F);
  const __m256i eight = _mm256_set1_epi8(8);
  for (int64_t b = 0; b < n / kQK4_0; b++) {
    const __m256 d = _mm256_set1_ps(f16(w[b].d) * f16(x[b].d));
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs));
    // Low nibbles are elements 0..15, high nibbles 16..31.
    const __m256i both = _mm256_insertf128_si256(_mm256_castsi128_si256(packed), _mm_srli_epi16(packed, 4), 1);
    const __m256i qw = _mm256_sub_epi8(_mm256_and_si256(both, low_mask), eight);
    const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs));
    acc = _mm256_fmadd_ps(d, mul_sum_i8_pairs(qw, qx), acc);
  }
  return hsum(acc);
}

void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / kQK8_0; b++) {
    const float* p = x + b * kQK8_0;
    __m256 v[4];
    __m256 maxabs = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
      v[k] = _mm256_loadu_ps(p + 8 * k);
      maxabs = _mm256_max_ps(maxabs, _mm256_andnot_ps(sign_bit, v[k]));
    }
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(maxabs, 1), _mm256_castps256_ps128(maxabs));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float d = amax / 127.0f;
    // As ggml's x86 quantizer: times 127 / amax (not 1 / d: the last bit differs, and decides exact halves,
    // which activations made of a Q4_0/Q5_0 embedding's steps hit), rounded half to even.
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[b].d = fp32_to_fp16(d);
    const __m256 mul = _mm256_set1_ps(id);
    __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[0], mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[1], mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[2], mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[3], mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    i0 = _mm256_packs_epi32(i0, i1);  // lanes interleaved per 128 bits...
    i2 = _mm256_packs_epi32(i2, i3);
    i0 = _mm256_packs_epi16(i0, i2);
    // ...restore element order after the two in-lane packs.
    i0 = _mm256_permutevar8x32_epi32(i0, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs), i0);
  }
}

void axpy_f32(float* y, float a, const float* x, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; i++) y[i] += a * x[i];
}

// exp(x) for 8 floats (Cephes expf, exp_cephes.h), scaled by 2^n through the
// exponent bits; relative error ~1e-7 over the range used.
inline __m256 exp8(__m256 x) {
  using namespace exp_cephes;
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(kMaxX)), _mm256_set1_ps(-kMaxX));
  __m256 fx = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(kLog2e), _mm256_set1_ps(0.5f)));
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(kLn2Hi), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(kLn2Lo), x);
  __m256 y = _mm256_set1_ps(kPoly[0]);
  for (int i = 1; i < 6; i++) y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(kPoly[i]));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
  const __m256i pow2n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(pow2n));
}

float exp_sum_f32(float* x, float m, int64_t n) {
  const __m256 mv = _mm256_set1_ps(m);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
    _mm256_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  float sum = hsum(acc);
  for (; i < n; i++) sum += (x[i] = std::exp(x[i] - m));
  return sum;
}

}  // namespace

const DotKernels* avx2_dot_kernels() {
  static const DotKernels k{IsaLevel::Avx2, dot_f32, dot_f16_f32, dot_bf16_f32,
                            dot_q8_0_q8_0, dot_q4_0_q8_0, quantize_q8_0, axpy_f32, exp_sum_f32, 32};
  return &k;
}

}  // namespace kestrel

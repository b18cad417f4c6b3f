// AVX-512 k-quant dots (512-bit vpmaddubsw + vpmaddwd, one token or four) and 512-bit FP8 dots; called only when
// the CPU has AVX-512 VNNI (the table stands for that level).
#include <immintrin.h>

#include <cstring>

#include "kernels/x86/fp8_f16c.h"
#include "kernels/kquant_dot.h"

namespace kestrel {
namespace {
// 16 E4M3 bytes to 16 floats / 256 (as in e4m3x8_div256, 512 bits wide).
inline __m512 e4m3x16_div256(const uint8_t* q) {
  const __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
  const __m256i h = _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x7F)), 7),
                                    _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x80)), 8));
  return _mm512_cvtph_ps(h);
}

float dot_fp8(const BlockFp8* w, const float* x, int64_t n) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  for (int64_t i = 0; i < n / kQKFp8; i++, x += kQKFp8) {
    const __m512 d = _mm512_set1_ps(256.0f * _cvtsh_ss(w[i].d));
    acc0 = _mm512_fmadd_ps(_mm512_mul_ps(e4m3x16_div256(w[i].qs), d), _mm512_loadu_ps(x), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_mul_ps(e4m3x16_div256(w[i].qs + 16), d), _mm512_loadu_ps(x + 16), acc1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

// Prefill: T tokens against one row, 512 bits wide. Per 64 weights and
// token, vpmaddubsw (unsigned levels x signed activations, pairs stay
// within int16) then vpmaddwd by the sub-blocks' scales as int16 (pairs
// summed and scaled in one instruction; no 32-bit multiplies); minimums and
// offsets go through the activations' sums of 16, vectorised the same way.
inline __m512i join(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }

// The 12 scale bytes of a Q4_K/Q5_K block as 16 int16: 8 scales, then 8
// minimums (ggml's packing: 6 bits each, the top two of the last four in
// the first eight bytes).
inline __m256i scales_and_mins_k4(const uint8_t* q) {
  uint32_t u[4];
  std::memcpy(u, q, 12);
  constexpr uint32_t k6 = 0x3f3f3f3f, k4 = 0x0f0f0f0f, k2 = 0x03030303;
  u[3] = ((u[2] >> 4) & k4) | (((u[1] >> 6) & k2) << 4);
  const uint32_t mins_lo = u[1] & k6;
  u[1] = (u[2] & k4) | (((u[0] >> 6) & k2) << 4);
  u[2] = mins_lo;
  u[0] &= k6;
  return _mm256_cvtepu8_epi16(
      _mm_setr_epi32(static_cast<int>(u[0]), static_cast<int>(u[1]), static_cast<int>(u[2]), static_cast<int>(u[3])));
}

template <bool kFive, int T, typename Block>
void dot_k4_512(const Block* w, const BlockQ8_K* const* xs, int64_t n, float* out) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  // Lanes 0-15 take scale 2c, lanes 16-31 scale 2c + 1 (int16 lanes of the 64 products' pairs).
  __m512i pick[4];
  for (int c = 0; c < 4; c++)
    pick[c] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(static_cast<int16_t>(2 * c))),
                                 _mm256_set1_epi16(static_cast<int16_t>(2 * c + 1)), 1);
  __m512 acc[T];
  __m128 acc_min[T];
  // Q5_K sums in the order of ggml's AVX2 q5_K dot (what llama.cpp runs for
  // Q5_K on x86): 8 float lanes, lane L taking the integer sums of bytes
  // 4L..4L+3 of every 32-byte run, and the minimums' term as one scalar.
  // With the same Q8_K activations the result is bit-identical to it.
  __m256 acc8[T];
  float summs[T];
  for (int t = 0; t < T; t++)
    acc[t] = _mm512_setzero_ps(), acc_min[t] = _mm_setzero_ps(), acc8[t] = _mm256_setzero_ps(), summs[t] = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; i++) {
    const __m256i sm = scales_and_mins_k4(w[i].scales);
    const __m512i scales = _mm512_castsi256_si512(sm);  // lanes 0-7: the scales
    const __m128i mins = _mm256_extracti128_si256(sm, 1);
    __m512i sumi[T];
    for (int t = 0; t < T; t++) sumi[t] = _mm512_setzero_si512();
    __m256i qh;
    if constexpr (kFive) qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i].qh));
    for (int c = 0; c < 4; c++) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i].qs + 32 * c));
      __m256i lo = _mm256_and_si256(q, low4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
      if constexpr (kFive) {
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one), 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one), 4));
      }
      const __m512i levels = join(lo, hi);  // sub-blocks 2c and 2c + 1: 64 activations in a row
      const __m512i scale = _mm512_permutexvar_epi16(pick[c], scales);
      for (int t = 0; t < T; t++) {
        const __m512i a = _mm512_loadu_si512(xs[t][i].qs + 64 * c);
        sumi[t] = _mm512_add_epi32(sumi[t], _mm512_madd_epi16(_mm512_maddubs_epi16(levels, a), scale));
      }
    }
    const float wd = _cvtsh_ss(w[i].d), wmin = _cvtsh_ss(w[i].dmin);
    for (int t = 0; t < T; t++) {
      const BlockQ8_K& x = xs[t][i];
      // Sums of 32 activations (adjacent bsums added) times each sub-block's minimum.
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums));
      const __m128i sums32 = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
      const __m128i min_products = _mm_madd_epi16(sums32, mins);
      if constexpr (kFive) {
        const __m256i sumi8 = _mm256_add_epi32(_mm512_castsi512_si256(sumi[t]), _mm512_extracti64x4_epi64(sumi[t], 1));
        acc8[t] = _mm256_fmadd_ps(_mm256_set1_ps(x.d * wd), _mm256_cvtepi32_ps(sumi8), acc8[t]);
        const __m128i h = _mm_hadd_epi32(_mm_hadd_epi32(min_products, _mm_setzero_si128()), _mm_setzero_si128());
        summs[t] += -x.d * wmin * static_cast<float>(_mm_cvtsi128_si32(h));
      } else {
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi[t]), _mm512_set1_ps(x.d * wd), acc[t]);
        acc_min[t] = _mm_fmadd_ps(_mm_cvtepi32_ps(min_products), _mm_set1_ps(x.d * wmin), acc_min[t]);
      }
    }
  }
  for (int t = 0; t < T; t++) {
    if constexpr (kFive) {
      // ggml's hsum_float_8: ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)).
      __m128 r = _mm_add_ps(_mm256_extractf128_ps(acc8[t], 1), _mm256_castps256_ps128(acc8[t]));
      r = _mm_add_ps(r, _mm_movehl_ps(r, r));
      r = _mm_add_ss(r, _mm_movehdup_ps(r));
      out[t] = _mm_cvtss_f32(r) + summs[t];
    } else {
      out[t] = _mm512_reduce_add_ps(acc[t]) - _mm512_reduce_add_ps(_mm512_zextps128_ps512(acc_min[t]));
    }
  }
}

template <int T>
void dot_q6_K_512(const BlockQ6_K* w, const BlockQ8_K* const* xs, int64_t n, float* out) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), three = _mm256_set1_epi8(3);
  // Bytes 0-3 of a 4-byte group, each repeated 8 times (within each 128-bit lane: 0,1 then 2,3).
  const __m256i repeat8 =
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  __m512 acc[T];
  for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
  for (int64_t i = 0; i < n / kQK_K; i++) {
    __m512i sumi[T];
    for (int t = 0; t < T; t++) sumi[t] = _mm512_setzero_si512();
    for (int h = 0; h < 2; h++) {
      const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i].ql + 64 * h));
      const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i].ql + 64 * h + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i].qh + 32 * h));
      const __m256i lows[4] = {_mm256_and_si256(ql0, low4), _mm256_and_si256(ql1, low4),
                               _mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                               _mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4)};
      __m256i level[4];
      for (int q = 0; q < 4; q++)
        level[q] =
            _mm256_or_si256(lows[q], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * q), three), 4));
      for (int k = 0; k < 2; k++) {
        // Activations 128h + 64k .. +63: sub-blocks of 16 with scales[8h + 4k .. + 3].
        const __m512i levels = join(level[2 * k], level[2 * k + 1]);
        int32_t four;
        std::memcpy(&four, w[i].scales + 8 * h + 4 * k, 4);
        const __m512i scale =
            _mm512_cvtepi8_epi16(_mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_cvtsi32_si128(four)), repeat8));
        for (int t = 0; t < T; t++) {
          const __m512i a = _mm512_loadu_si512(xs[t][i].qs + 128 * h + 64 * k);
          sumi[t] = _mm512_add_epi32(sumi[t], _mm512_madd_epi16(_mm512_maddubs_epi16(levels, a), scale));
        }
      }
    }
    // The levels carry an offset of 32: 32 * scale * (sum of the activations)
    // per sub-block of 16, taken off in integers (in floats, after the large
    // sums, it would cancel away digits of the result).
    const __m256i scales = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[i].scales)));
    const float wd = _cvtsh_ss(w[i].d);
    for (int t = 0; t < T; t++) {
      const BlockQ8_K& x = xs[t][i];
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums));
      const __m512i offset = _mm512_zextsi256_si512(_mm256_slli_epi32(_mm256_madd_epi16(bs, scales), 5));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(sumi[t], offset)), _mm512_set1_ps(x.d * wd), acc[t]);
    }
  }
  for (int t = 0; t < T; t++) out[t] = _mm512_reduce_add_ps(acc[t]);
}

// Prefill: 4 tokens per unpacking of a block's levels (8 measured no faster
// on the 1.1B at pp128: 114-116 vs 119-131 tok/s for Q4_K, within the noise).
constexpr int kTokens = 4;

}  // namespace

// quantize_row_q8_K's arithmetic in 16-element vectors (one vector is one of
// the 16 sums): the same scale (-127 / the first element of largest
// magnitude), the same products, rounding half to even, so the same bytes.
void quantize_row_q8_K_avx512(const float* x, BlockQ8_K* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; i++, x += kQK_K) {
    __m512 amax = _mm512_setzero_ps();
    for (int j = 0; j < kQK_K; j += 16) amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_loadu_ps(x + j)));
    const float m = _mm512_reduce_max_ps(amax);
    if (m == 0) {
      y[i] = {};
      continue;
    }
    float max = 0;
    for (int j = 0; j < kQK_K; j += 16) {
      const __mmask16 hit = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + j)), _mm512_set1_ps(m), _CMP_EQ_OQ);
      if (hit) {
        max = x[j + __builtin_ctz(hit)];
        break;
      }
    }
    const float iscale = -127.0f / max;
    const __m512 s = _mm512_set1_ps(iscale);
    for (int j = 0; j < kQK_K; j += 16) {
      const __m512 v = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(x + j), s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m512i q = _mm512_min_epi32(_mm512_cvtps_epi32(v), _mm512_set1_epi32(127));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y[i].qs + j), _mm512_cvtsepi32_epi8(q));
      y[i].bsums[j / 16] = static_cast<int16_t>(_mm512_reduce_add_epi32(q));
    }
    y[i].d = 1 / iscale;
  }
}

const KQuantDots* avx512vnni_kquant_dots() {
  // One token (decode) through the same kernels as prefill.
  static const KQuantDots k{"avx512 vnni",
                            one_token<BlockQ4_K, dot_k4_512<false, 1, BlockQ4_K>>,
                            one_token<BlockQ5_K, dot_k4_512<true, 1, BlockQ5_K>>,
                            one_token<BlockQ6_K, dot_q6_K_512<1>>,
                            dot_fp8,
                            kTokens,
                            dot_k4_512<false, kTokens, BlockQ4_K>,
                            dot_k4_512<true, kTokens, BlockQ5_K>,
                            dot_q6_K_512<kTokens>};
  return &k;
}

}  // namespace kestrel

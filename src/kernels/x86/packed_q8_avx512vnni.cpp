// Compiled with AVX-512 F/BW/VL/DQ/VNNI; called only when the CPU has them.
// The micro-kernel: NG row groups (16 rows each, one row per lane) x T tokens;
// the block's weight vectors stay in registers while every token's
// activations are broadcast 4 bytes at a time into vpdpbusd. Batches run
// 2 groups x 4 tokens (each broadcast feeds two vpdpbusd); a single token
// runs 1 group x 1 token (decode streams weights once: fewer concurrent
// streams measured faster).
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "formats/nonlinear4_formats.h"
#include "kernels/packed_q8.h"

namespace kestrel {
namespace {

#include "kernels/x86/packed_q8_512.h"  // NOLINT(bugprone-suspicious-include): in this namespace

// How far ahead the super-block kinds prefetch their units (1.7-2.8 KB a unit; 1 measured as 2, 4 slower).
constexpr int kPrefetchUnits = 2;

// A super-block kind's unit is read as several streams (scales, high bits,
// quants) that the hardware prefetcher follows poorly: block j of `unit`
// prefetches the j-th eighth of the unit kPrefetchUnits ahead, running on into
// the next group (the one this thread most likely computes next) but not past
// `end`, the matrix's.
template <PackedKind W>
inline void prefetch_unit_ahead(const uint8_t* unit, int64_t j, const uint8_t* end) {
  constexpr size_t kUnit = PackedWeight::unit_bytes_of(W), kSlice = kUnit / 8;
  const uint8_t* p = unit + kPrefetchUnits * kUnit + j * kSlice;
  for (size_t i = 0; i < kSlice; i += 64)
    if (p + i < end) _mm_prefetch(reinterpret_cast<const char*>(p + i), _MM_HINT_T0);
}

// The k-quants (one group): per super-block and token, each sub-block's
// integer dot times its integer scale, plus Q3_K's -4 and Q6_K's -32 offsets
// as scale x offset x the activations' sub-block sums; the minimums times
// the same sums apart (the offsets and minimums in vpdpwssd, int16 pairs
// against the activations' half_sums / pair_sums); then one FMA each per
// super-block (packed_gemm_reference_integer_scaled's arithmetic; integer sums
// are exact, so the order within a super-block does not change the result).
template <PackedKind W, int T0, int T>
void integer_scaled_kernel(const PackedWeight& pw, int64_t g, const PackedActivations& x, int64_t tile, float* y,
                           int64_t ldy, bool prefetch) {
  // Q4_K/Q5_K: one 32-element sub-block per block, levels packed as Q4_0's (Q5_K's fifth bits beside);
  // Q6_K: two 16-element sub-blocks per block, low nibbles as Q4_0's and two high bits beside;
  // Q2_K/Q3_K: two 16-element sub-blocks of 2-bit planes (Q3_K's third bits beside).
  constexpr bool kPerBlock = PackedWeight::scale_per_block_of(W);
  constexpr bool kNibbles = kPerBlock || W == PackedKind::Q6_K;
  constexpr bool kThree = W == PackedKind::Q3_K, kMin = PackedWeight::has_kmin_of(W);
  constexpr int32_t kZero = PackedWeight::zero_level_of(W);
  // The unit layout as compile-time constants (the runtime accessors' switches on the kind, per block,
  // would cost more than the block's dots).
  using PW = PackedWeight;
  constexpr size_t kScales = PW::sub_scales_offset_of(W), kMins = PW::kQ4kMinsOffset;
  constexpr size_t kHigh = PW::high_bits_offset_of(W), kHighBytes = 64 * PW::high_words_of(W);
  constexpr size_t kHeader = PW::unit_header_bytes_of(W), kQuants = PW::quant_bytes_of(W), kUnit = PW::unit_bytes_of(W);
  auto times_minus_zero = [](__m512i pairs) { return kq_times_minus_zero<W>(pairs); };
  auto scales16 = [](const uint8_t* p) { return kq_scales16<W>(p); };
  __m512 acc[T];
  for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
  const uint8_t* unit = pw.data + g * pw.group_bytes();
  const uint8_t* matrix_end = pw.data + pw.n_groups * pw.group_bytes();
  for (int64_t b0 = 0; b0 < pw.n_blocks; b0 += 8, unit += kUnit) {
    __m512i isum[T], msum[T];
    for (int t = 0; t < T; t++) isum[t] = msum[t] = _mm512_setzero_si512();
    for (int j = 0; j < 8; j++) {
      // On the first pass over the group only: later token tiles find it in cache.
      if (prefetch) prefetch_unit_ahead<W>(unit, j, matrix_end);
      const uint8_t* a = x.block(tile, b0 + j);
      const uint8_t* q = unit + kHeader + j * kQuants;
      if constexpr (kNibbles) {
        __m512i w[8];
        load_block<W>(q, unit + kHigh + kHighBytes * j, w);
        __m512i sc, sc_hi = _mm512_setzero_si512();
        if constexpr (kPerBlock) {
          sc = scales16(unit + kScales + 16 * j);
        } else {
          sc = scales16(unit + kScales + 32 * j);
          sc_hi = scales16(unit + kScales + 32 * j + 16);
        }
        // Q6_K's zero level: -32 x (sc x sum_lo + sc_hi x sum_hi), one vpdpwssd per token against the
        // activations' half_sums, with the scales times -32 (within int16) as each lane's pair.
        __m512i zero_pair = _mm512_setzero_si512();
        if constexpr (kZero != 0)
          zero_pair = times_minus_zero(int16_pairs(sc, sc_hi));
        for (int t = T0; t < T0 + T; t++) {
          // Two chains (decode latency); Q6_K's are its two sub-blocks.
          __m512i dot = _mm512_setzero_si512(), dot_hi = _mm512_setzero_si512();
          for (int k = 0; k < 4; k++) {
            dot = _mm512_dpbusd_epi32(dot, w[k], broadcast_i32(a + kQK8_0 * t + 4 * k));
            dot_hi = _mm512_dpbusd_epi32(dot_hi, w[k + 4], broadcast_i32(a + kQK8_0 * t + 16 + 4 * k));
          }
          if constexpr (kPerBlock) {
            isum[t - T0] = _mm512_add_epi32(isum[t - T0], _mm512_mullo_epi32(_mm512_add_epi32(dot, dot_hi), sc));
          } else {
            isum[t - T0] = _mm512_add_epi32(isum[t - T0], _mm512_add_epi32(_mm512_mullo_epi32(dot, sc),
                                                                           _mm512_mullo_epi32(dot_hi, sc_hi)));
            isum[t - T0] = _mm512_dpwssd_epi32(isum[t - T0], zero_pair, broadcast_i32(a + PA::kHalfSumsOffset + 4 * t));
          }
        }
        continue;
      }
      __m512i high = _mm512_setzero_si512();
      if constexpr (kThree) high = _mm512_loadu_si512(unit + kHigh + 64 * j);
      // The two sub-blocks' scales, and what their activation sums meet in one vpdpwssd per token (int16
      // pairs, the block's first 16 elements in the low half): Q2_K's minimums, Q3_K's scales x -4.
      __m512i sc[2], offsets;
      for (int hf = 0; hf < 2; hf++) sc[hf] = scales16(unit + kScales + (2 * j + hf) * 16);
      if constexpr (kMin) {  // Q2_K: scale | min << 4
        offsets = int16_pairs(_mm512_srli_epi32(sc[0], 4), _mm512_srli_epi32(sc[1], 4));
        for (int hf = 0; hf < 2; hf++) sc[hf] = _mm512_and_si512(sc[hf], _mm512_set1_epi32(0xF));
      } else {
        offsets = times_minus_zero(int16_pairs(sc[0], sc[1]));
      }
      for (int hf = 0; hf < 2; hf++) {
        __m512i w[4];
        load_planes<W>(q, high, hf, w);
        for (int t = T0; t < T0 + T; t++) {
          __m512i dot = _mm512_setzero_si512();
          for (int sh = 0; sh < 4; sh++)
            dot = _mm512_dpbusd_epi32(dot, w[sh], broadcast_i32(a + kQK8_0 * t + 16 * hf + 4 * sh));
          isum[t - T0] = _mm512_add_epi32(isum[t - T0], _mm512_mullo_epi32(dot, sc[hf]));
        }
      }
      for (int t = T0; t < T0 + T; t++) {
        const __m512i halves = broadcast_i32(a + PA::kHalfSumsOffset + 4 * t);
        if constexpr (kMin) msum[t - T0] = _mm512_dpwssd_epi32(msum[t - T0], offsets, halves);
        else isum[t - T0] = _mm512_dpwssd_epi32(isum[t - T0], offsets, halves);
      }
    }
    if constexpr (kPerBlock) {
      // The minimums times the blocks' sums, a block pair per vpdpwssd (int16 pairs: the weights' minimums
      // widened from bytes, the activations' pair_sums), once per super-block: the block loop keeps its
      // registers for the dots.
      __m512i mins[4];
      for (int p = 0; p < 4; p++)
        mins[p] = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit + kMins + 32 * p)));
      for (int t = T0; t < T0 + T; t++)
        for (int p = 0; p < 4; p++)
          msum[t - T0] = _mm512_dpwssd_epi32(msum[t - T0], mins[p],
                                             broadcast_i32(x.block(tile, b0 + 2 * p) + PA::kPairSumsOffset + 4 * t));
    }
    const uint8_t* a0 = x.block(tile, b0);
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit)));
    __m512 dmin = _mm512_setzero_ps();
    if constexpr (kMin) dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit + PW::kMinsOffset)));
    for (int t = T0; t < T0 + T; t++) {
      const __m512 dx = broadcast_f32(a0 + PA::kScaleOffset + 4 * t);
      acc[t - T0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t - T0]), _mm512_mul_ps(d, dx), acc[t - T0]);
      if constexpr (kMin)
        acc[t - T0] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum[t - T0]), _mm512_mul_ps(dmin, dx), acc[t - T0]);
    }
  }
  const int64_t t0 = tile * PA::kTokensPerTile + T0;
  const int64_t r = g * G;
  const __mmask16 mask = row_mask(pw, r);
  for (int t = 0; t < T; t++) _mm512_mask_storeu_ps(y + (t0 + t) * ldy + r, mask, acc[t]);
}

// The 32-element block formats and IQ4_XS: NG groups x tokens T0..T0+T-1 of a
// token tile, one scale (and Q4_1/Q5_1's minimum) per block and row; with two
// groups each broadcast activation word feeds two vpdpbusd.
template <PackedKind W, int T0, int T, int NG>
void block_kernel(const PackedWeight& pw, int64_t g, const PackedActivations& x, int64_t tile, float* y, int64_t ldy,
                  bool prefetch) {
  const int64_t nb = pw.n_blocks;
  const uint8_t* a = x.block(tile, 0);  // advances PA::kBytesPerBlock per block: constant offsets inside
  // PackedWeight's unit layout as compile-time constants (the accessors' runtime switches on the kind
  // would cost more per block than the block's dots).
  constexpr size_t kHeader = PackedWeight::header_bytes_of(W), kQuants = PackedWeight::quant_bytes_of(W);
  constexpr int kPerUnit = PackedWeight::blocks_per_unit_of(W);
  constexpr size_t kUnitHeader = PackedWeight::unit_header_bytes_of(W), kUnit = PackedWeight::unit_bytes_of(W);
  const size_t group_bytes = pw.group_bytes();
  const uint8_t* first = pw.data + g * group_bytes;
  const uint8_t* matrix_end = pw.data + pw.n_groups * group_bytes;
  __m512 acc[NG][T];
  for (int i = 0; i < NG; i++)
    for (int t = 0; t < T; t++) acc[i][t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b++, a += PA::kBytesPerBlock) {
    __m512i w[NG][8];
    __m512 dw[NG], mw[NG];
    const uint8_t* unit = first + (b / kPerUnit) * kUnit;
    const uint8_t* hdr0 = kPerUnit == 8 ? unit : unit + (b % 2) * kHeader;
    const uint8_t* q0 = unit + kUnitHeader + (b % kPerUnit) * kQuants;
    // IQ4_XS's super-block units as the k-quants' (block pairs stream well without: measured slower with).
    if constexpr (kPerUnit == 8)
      if (prefetch) prefetch_unit_ahead<W>(unit, b % 8, matrix_end);
    for (int i = 0; i < NG; i++) {
      const uint8_t* hdr = hdr0 + i * group_bytes;
      const uint8_t* qh = nullptr;
      if constexpr (kHasQh<W>) qh = hdr + PackedWeight::qh_offset_of(W);
      load_block<W>(q0 + i * group_bytes, qh, w[i]);
      dw[i] = block_scale<W>(hdr, b);
      if constexpr (kHasMin<W>)
        mw[i] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(hdr + PackedWeight::kMinsOffset)));
    }
    for (int t = T0; t < T0 + T; t++) {
      const __m512i bias = broadcast_i32(a + PA::kBiasOffset + 4 * t);
      // Two chains of 4 vpdpbusd per block instead of one of 8: with one group and one token (decode) the
      // chain's latency, not the loads, would bound the block (integer sums: the same result).
      __m512i dot[NG], dot_hi[NG];
      for (int i = 0; i < NG; i++) dot[i] = bias, dot_hi[i] = _mm512_setzero_si512();
      for (int k = 0; k < 8; k++) {
        const __m512i xk = broadcast_i32(a + kQK8_0 * t + 4 * k);
        for (int i = 0; i < NG; i++) {
          if (k < 4) dot[i] = _mm512_dpbusd_epi32(dot[i], w[i][k], xk);
          else dot_hi[i] = _mm512_dpbusd_epi32(dot_hi[i], w[i][k], xk);
        }
      }
      for (int i = 0; i < NG; i++) dot[i] = _mm512_add_epi32(dot[i], dot_hi[i]);
      const __m512 dx = broadcast_f32(a + PA::kScaleOffset + 4 * t);
      for (int i = 0; i < NG; i++)
        acc[i][t - T0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[i]), _mm512_mul_ps(dw[i], dx), acc[i][t - T0]);
      if constexpr (kHasMin<W>) {
        const __m512 sx = broadcast_f32(a + PA::kSumOffset + 4 * t);
        for (int i = 0; i < NG; i++) acc[i][t - T0] = _mm512_fmadd_ps(mw[i], sx, acc[i][t - T0]);
      }
    }
  }
  const int64_t t0 = tile * PA::kTokensPerTile + T0;
  for (int i = 0; i < NG; i++) {
    const int64_t r = (g + i) * G;
    const __mmask16 mask = row_mask(pw, r);
    for (int t = 0; t < T; t++) _mm512_mask_storeu_ps(y + (t0 + t) * ldy + r, mask, acc[i][t]);
  }
}

// prefetch: whether this is the first pass over the groups in the token chunk (the one that reads them from
// memory).
template <PackedKind W, int T0, int T, int NG>
void tile_kernel(const PackedWeight& pw, int64_t g, const PackedActivations& x, int64_t tile, float* y, int64_t ldy,
                 bool prefetch) {
  if constexpr (kIntegerScaled<W>) {
    static_assert(NG == 1);
    integer_scaled_kernel<W, T0, T>(pw, g, x, tile, y, ldy, prefetch);
  } else {
    block_kernel<W, T0, T, NG>(pw, g, x, tile, y, ldy, prefetch);
  }
}

// Tokens T0..T0+n-1 of a token tile in kernels of at most TMax tokens.
template <PackedKind W, int T0, int TMax, int NG>
void tokens(const PackedWeight& pw, int64_t g, const PackedActivations& x, int64_t tile, int64_t n, float* y,
            int64_t ldy, bool prefetch) {
  if constexpr (TMax > 0 && T0 < PA::kTokensPerTile) {
    if (n >= TMax) {
      tile_kernel<W, T0, TMax, NG>(pw, g, x, tile, y, ldy, prefetch);
      if (n > TMax) tokens<W, T0 + TMax, TMax, NG>(pw, g, x, tile, n - TMax, y, ldy, false);
    } else {
      tokens<W, T0, TMax - 1, NG>(pw, g, x, tile, n, y, ldy, prefetch);
    }
  }
}

// Token tiles [tile_begin, tile_end) x NG groups from g. Registers bound the
// tokens per kernel: 8 weight vectors, a scale and an accumulator per token
// with one group; twice the weights and accumulators with two.
template <PackedKind W, int NG>
void group_tiles(const PackedWeight& pw, int64_t g, const PackedActivations& x, int64_t tile_begin, int64_t tile_end,
                 float* y, int64_t ldy) {
  // Two groups: twice the weights and accumulators, 4 tokens. The k-quants, one group, take 8 (Q6_K 24%
  // faster than with 4; Q4_K/Q5_K and Q2_K once their minimums' products went to vpdpwssd, which freed
  // the registers that had made 8 slower).
  constexpr int kMaxTokens = NG == 2 ? 4 : 8;
  for (int64_t i = tile_begin; i < tile_end; i++) {
    const int64_t n = std::min<int64_t>(PA::kTokensPerTile, x.n_tokens - i * PA::kTokensPerTile);
    tokens<W, 0, kMaxTokens, NG>(pw, g, x, i, n, y, ldy, i == tile_begin);
  }
}

template <PackedKind W>
void gemm(const PackedWeight& pw, int64_t g0, int64_t g1, const PackedActivations& x, float* y, int64_t ldy,
          int64_t token_chunk) {
  // Token tiles in chunks whose activations stay in L2 while the groups stream past.
  const int64_t tiles_per_chunk = (token_chunk + PA::kTokensPerTile - 1) / PA::kTokensPerTile;
  for (int64_t tc = 0; tc < x.n_tiles(); tc += tiles_per_chunk) {
    const int64_t tc_end = std::min(x.n_tiles(), tc + tiles_per_chunk);
    int64_t g = g0;
    // The k-quants' kernel runs one group at a time (its scales and sums take the registers a second
    // group's weights would).
    if constexpr (!kIntegerScaled<W>)
      for (; g + 2 <= g1 && x.n_tokens > 1; g += 2) group_tiles<W, 2>(pw, g, x, tc, tc_end, y, ldy);
    for (; g < g1; g++) group_tiles<W, 1>(pw, g, x, tc, tc_end, y, ldy);
  }
}

}  // namespace

static void packed_gemm_vnni(const PackedWeight& w, int64_t g0, int64_t g1, const PackedActivations& x, float* y, int64_t ldy,
                      int64_t token_chunk) {
  token_chunk = std::clamp<int64_t>(token_chunk, 1, 256);
  with_packed_kind(w.kind, [&](auto kind) { gemm<decltype(kind)::value>(w, g0, g1, x, y, ldy, token_chunk); });
}

namespace {
// The AVX-VNNI kernels (packed_q8_avxvnni.cpp) in this file's EVEX encoding: the same code, tested here.
namespace vnni256 {
#define KESTREL_PACKED_DPBUSD 1
#define KESTREL_DPBUSD256 _mm256_dpbusd_epi32
#include "kernels/x86/packed_q8_256.h"  // NOLINT(bugprone-suspicious-include): one ISA per TU
}  // namespace vnni256
}  // namespace

const PackedGemm& avx512vl_vnni256_packed_gemm() {
  static const PackedGemm t{"avx-vnni code, evex (avx512vl vnni)", vnni256::packed_gemm_256, "", ""};
  return t;
}

const PackedGemm& avx512vnni_packed_gemm() {
  static const PackedGemm t{"avx512 vnni", packed_gemm_vnni,
                           "vpdpbusd, one block per lane; 32 rows x 4 tokens for batches, 16 rows x 1 token for decode",
                           "vpdpbusd, one block per lane; 16 rows x 8 tokens for batches, 16 rows x 1 token for decode"};
  return t;
}

}  // namespace kestrel

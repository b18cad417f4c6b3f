#pragma once
// The qdot.h kernels in 256-bit vectors, for two builds: AVX2 (int8 products
// by vpmaddubsw + vpmaddwd) and AVX-512 VNNI (vpdpbusd on 256-bit vectors,
// one instruction, no int16 stage). Included by one translation unit per ISA,
// inside an anonymous namespace, after <immintrin.h>, with KESTREL_QDOT_VNNI
// defined to 0 or 1 and the format headers included.
//
// Every kernel keeps ggml's arithmetic per block: integer sums of level x
// activation, then one float multiply-add of the block's scales per block
// into 8 float lanes, summed across lanes at the end.

// acc + (4-byte groups of u8 x s8 products, summed into int32 lanes).
inline __m256i dot_u8s8(__m256i acc, __m256i u8, __m256i s8) {
#if KESTREL_QDOT_VNNI
  return _mm256_dpbusd_epi32(acc, u8, s8);
#else
  // Levels times activations: pairs stay within int16 for |level| <= 127 and |activation| <= 127.
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u8, s8), _mm256_set1_epi16(1)));
#endif
}

// Signed weights: |w| times the activations carrying w's sign.
inline __m256i dot_s8s8(__m256i acc, __m256i w, __m256i x) {
  return dot_u8s8(acc, _mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
}

inline float hsum8(__m256 v) {
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// 16 bytes of nibbles as 32 bytes: low nibbles (elements 0-15), then high nibbles (16-31).
inline __m256i nibbles32(const uint8_t* qs) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(b), _mm_srli_epi16(b, 4), 1);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// Bit j of 32 bits as byte j: 0xFF where set, 0 where not.
inline __m256i bits_as_bytes(const uint8_t* bits4) {
  uint32_t bits;
  std::memcpy(&bits, bits4, 4);
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

// Bit j of the 32-bit qh as byte j: 0x10 where set, 0 where not (Q5's fifth bit).
inline __m256i fifth_bits(const uint8_t* qh4) { return _mm256_and_si256(bits_as_bytes(qh4), _mm256_set1_epi8(0x10)); }

// 32 nibbles through a 16-entry int8 table (IQ4_NL / MXFP4 levels).
inline __m256i lookup32(const uint8_t* qs, __m256i table) { return _mm256_shuffle_epi8(table, nibbles32(qs)); }

inline __m256i table256(const int8_t* t) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(t));
  return _mm256_inserti128_si256(_mm256_castsi128_si256(v), v, 1);
}

// --- 32-wide blocks ------------------------------------------------------

// Q4_1 / Q5_1 x Q8_1: unsigned levels; the minimum enters through the activations' scaled sums.
template <bool kFive, typename Block, int T>
void dot_q4q5_1(const void* wv, const void* const* xv, int64_t n, float* out) {
  const auto* w = static_cast<const Block*>(wv);
  __m256 acc[T];
  float mins[T];
  for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps(), mins[t] = 0;
  for (int64_t i = 0; i < n / 32; i++) {
    __m256i level = nibbles32(w[i].qs);
    if constexpr (kFive) level = _mm256_or_si256(level, fifth_bits(w[i].qh));
    const float wd = _cvtsh_ss(w[i].d), wm = _cvtsh_ss(w[i].m);
    for (int t = 0; t < T; t++) {
      const BlockQ8_1& x = static_cast<const BlockQ8_1*>(xv[t])[i];
      const __m256 s = _mm256_cvtepi32_ps(dot_u8s8(_mm256_setzero_si256(), level, load256(x.qs)));
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(wd * _cvtsh_ss(x.d)), s, acc[t]);
      mins[t] += wm * _cvtsh_ss(x.s);
    }
  }
  for (int t = 0; t < T; t++) out[t] = hsum8(acc[t]) + mins[t];
}

// Signed 32-wide levels x Q8_0: Q5_0 (level - 16), IQ4_NL and MXFP4 (table values).
enum class Signed32 { Q5_0, IQ4_NL, MXFP4 };

template <Signed32 kKind, typename Block, int T>
void dot_signed32(const void* wv, const void* const* xv, int64_t n, float* out) {
  const auto* w = static_cast<const Block*>(wv);
  const __m256i table = table256(kKind == Signed32::MXFP4 ? kMxfp4Values : kIq4nlValues);
  __m256 acc[T];
  for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / 32; i++) {
    __m256i level;
    float wd;
    if constexpr (kKind == Signed32::Q5_0) {
      level = _mm256_sub_epi8(_mm256_or_si256(nibbles32(w[i].qs), fifth_bits(w[i].qh)), _mm256_set1_epi8(16));
      wd = _cvtsh_ss(w[i].d);
    } else if constexpr (kKind == Signed32::IQ4_NL) {
      level = lookup32(w[i].qs, table);
      wd = _cvtsh_ss(w[i].d);
    } else {
      level = lookup32(w[i].qs, table);
      wd = e8m0_to_fp32_half(w[i].e);
    }
    for (int t = 0; t < T; t++) {
      const BlockQ8_0& x = static_cast<const BlockQ8_0*>(xv[t])[i];
      const __m256 s = _mm256_cvtepi32_ps(dot_s8s8(_mm256_setzero_si256(), level, load256(x.qs)));
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(x.d) * wd), s, acc[t]);
    }
  }
  for (int t = 0; t < T; t++) out[t] = hsum8(acc[t]);
}

// --- 256-wide blocks x Q8_K ----------------------------------------------

// Two sub-blocks of 16 in one 32-byte run: lanes 0-3 take scale a, lanes 4-7 scale b.
inline __m256i pair_scales(int a, int b) { return _mm256_setr_epi32(a, a, a, a, b, b, b, b); }

// Q2_K (kThree false) and Q3_K: 2-bit levels (plus Q3_K's third bit) of
// element 128h + 32j + l in bits 2j of qs[32h + l]; Q2_K's minimums and
// Q3_K's offset of 4 go through the activations' sums of 16.
template <bool kThree, typename Block, int T>
void dot_q23_K(const void* wv, const void* const* xv, int64_t n, float* out) {
  const auto* w = static_cast<const Block*>(wv);
  const __m256i three = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
  __m256 acc[T];
  float mins[T];
  for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps(), mins[t] = 0;
  for (int64_t i = 0; i < n / kQK_K; i++) {
    int sc[16], mn[16];
    if constexpr (kThree) {
      int8_t s[16];
      unpack_scales_q3_K(w[i].scales, s);
      for (int j = 0; j < 16; j++) sc[j] = s[j] - 32, mn[j] = 4 * sc[j];
    } else {
      for (int j = 0; j < 16; j++) sc[j] = w[i].scales[j] & 0xF, mn[j] = w[i].scales[j] >> 4;
    }
    __m256i sumi[T];
    for (int t = 0; t < T; t++) sumi[t] = _mm256_setzero_si256();
    __m256i hm;
    if constexpr (kThree) hm = load256(w[i].hmask);
    for (int h = 0; h < 2; h++) {
      const __m256i q = load256(w[i].qs + 32 * h);
      for (int j = 0; j < 4; j++) {
        __m256i level = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), three);
        if constexpr (kThree)
          level = _mm256_or_si256(level, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + j), one), 2));
        const int is = 8 * h + 2 * j;
        const __m256i scale = pair_scales(sc[is], sc[is + 1]);
        for (int t = 0; t < T; t++) {
          const BlockQ8_K& x = static_cast<const BlockQ8_K*>(xv[t])[i];
          const __m256i d = dot_u8s8(_mm256_setzero_si256(), level, load256(x.qs + 128 * h + 32 * j));
          sumi[t] = _mm256_add_epi32(sumi[t], _mm256_mullo_epi32(d, scale));
        }
      }
    }
    const float wd = _cvtsh_ss(w[i].d);
    for (int t = 0; t < T; t++) {
      const BlockQ8_K& x = static_cast<const BlockQ8_K*>(xv[t])[i];
      int summ = 0;
      for (int j = 0; j < 16; j++) summ += mn[j] * x.bsums[j];
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(x.d * wd), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
      if constexpr (kThree) mins[t] += x.d * wd * static_cast<float>(summ);
      else mins[t] += x.d * _cvtsh_ss(w[i].dmin) * static_cast<float>(summ);
    }
  }
  for (int t = 0; t < T; t++) out[t] = hsum8(acc[t]) - mins[t];
}

template <int T>
void dot_iq4_xs(const void* wv, const void* const* xv, int64_t n, float* out) {
  const auto* w = static_cast<const BlockIQ4_XS*>(wv);
  const __m256i table = table256(kIq4nlValues);
  __m256 acc[T];
  for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK_K; i++) {
    __m256i sumi[T];
    for (int t = 0; t < T; t++) sumi[t] = _mm256_setzero_si256();
    for (int j = 0; j < 8; j++) {
      const __m256i level = lookup32(w[i].qs + 16 * j, table);
      const __m256i scale = _mm256_set1_epi32(iq4xs_scale(w[i], j) - 32);
      for (int t = 0; t < T; t++) {
        const BlockQ8_K& x = static_cast<const BlockQ8_K*>(xv[t])[i];
        const __m256i d = dot_s8s8(_mm256_setzero_si256(), level, load256(x.qs + 32 * j));
        sumi[t] = _mm256_add_epi32(sumi[t], _mm256_mullo_epi32(d, scale));
      }
    }
    const float wd = _cvtsh_ss(w[i].d);
    for (int t = 0; t < T; t++) {
      const BlockQ8_K& x = static_cast<const BlockQ8_K*>(xv[t])[i];
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(x.d * wd), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
    }
  }
  for (int t = 0; t < T; t++) out[t] = hsum8(acc[t]);
}

// --- IQ1-IQ3 grid formats x Q8_K ----------------------------------------

// 32 weights of an IQ block: unsigned grid magnitudes and +-1 sign bytes
// (IQ2, IQ3), or signed levels in eighths (IQ1, `sign` unused), and the
// integer scales of the two halves.
struct IqGroup {
  __m256i level, sign;
  int ls0, ls1;
};

inline __m256i grid4x8(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  return _mm256_setr_epi64x(static_cast<int64_t>(a), static_cast<int64_t>(b), static_cast<int64_t>(c),
                            static_cast<int64_t>(d));
}

inline uint32_t word_at(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline __m256i sign7x4(uint32_t aux) {
  return grid4x8(kIqSignBytes7[aux & 127], kIqSignBytes7[(aux >> 7) & 127], kIqSignBytes7[(aux >> 14) & 127],
                 kIqSignBytes7[(aux >> 21) & 127]);
}

// 32 sign bits (bit j: weight j negative) as +-1 bytes.
inline __m256i sign_bits32(const uint8_t* bits4) { return _mm256_or_si256(bits_as_bytes(bits4), _mm256_set1_epi8(1)); }

inline IqGroup iq_group(const BlockIQ2_XXS& b, int ib) {
  const uint32_t idx = word_at(b.qs + 4 * ib), aux = word_at(b.qs + 4 * ib + 2);
  const int ls = static_cast<int>(2 * (aux >> 28) + 1);
  return {grid4x8(kIq2xxsGrid[idx & 255], kIq2xxsGrid[(idx >> 8) & 255], kIq2xxsGrid[(idx >> 16) & 255],
                  kIq2xxsGrid[idx >> 24]),
          sign7x4(aux), ls, ls};
}

inline IqGroup iq_group(const BlockIQ2_XS& b, int ib) {
  const uint16_t* q = b.qs + 4 * ib;
  return {grid4x8(kIq2xsGrid[q[0] & 511], kIq2xsGrid[q[1] & 511], kIq2xsGrid[q[2] & 511], kIq2xsGrid[q[3] & 511]),
          grid4x8(kIqSignBytes7[q[0] >> 9], kIqSignBytes7[q[1] >> 9], kIqSignBytes7[q[2] >> 9], kIqSignBytes7[q[3] >> 9]),
          2 * (b.scales[ib] & 0xF) + 1, 2 * (b.scales[ib] >> 4) + 1};
}

inline IqGroup iq_group(const BlockIQ2_S& b, int ib) {
  const uint8_t* q = b.qs + 4 * ib;
  const uint32_t h = b.qh[ib];
  return {grid4x8(kIq2sGrid[q[0] | ((h << 8) & 0x300)], kIq2sGrid[q[1] | ((h << 6) & 0x300)],
                  kIq2sGrid[q[2] | ((h << 4) & 0x300)], kIq2sGrid[q[3] | ((h << 2) & 0x300)]),
          sign_bits32(b.qs + 32 + 4 * ib), 2 * (b.scales[ib] & 0xF) + 1, 2 * (b.scales[ib] >> 4) + 1};
}

inline IqGroup iq_group(const BlockIQ3_XXS& b, int ib) {
  const uint8_t* q = b.qs + 8 * ib;
  const uint32_t aux = word_at(b.qs + 64 + 4 * ib);
  const int ls = static_cast<int>(2 * (aux >> 28) + 1);
  const auto g = [&](int k) { return static_cast<int>(kIq3xxsGrid[q[k]]); };
  return {_mm256_setr_epi32(g(0), g(1), g(2), g(3), g(4), g(5), g(6), g(7)), sign7x4(aux), ls, ls};
}

inline IqGroup iq_group(const BlockIQ3_S& b, int ib) {
  const uint8_t* q = b.qs + 8 * ib;
  const uint32_t h = b.qh[ib];
  const int ls = 2 * ((b.scales[ib / 2] >> (4 * (ib % 2))) & 0xF) + 1;
  const auto g = [&](int k) { return static_cast<int>(kIq3sGrid[q[k] | (((h >> k) & 1) << 8)]); };
  return {_mm256_setr_epi32(g(0), g(1), g(2), g(3), g(4), g(5), g(6), g(7)), sign_bits32(b.signs + 4 * ib), ls, ls};
}

// IQ1 levels -1/0/+1 as eighths plus the shift: 8 * level +- 1.
inline __m256i iq1_eighths(__m256i grid, __m256i shift) {
  return _mm256_add_epi8(_mm256_sign_epi8(_mm256_set1_epi8(8), grid), shift);
}

inline IqGroup iq_group(const BlockIQ1_S& b, int ib) {
  const uint8_t* q = b.qs + 4 * ib;
  const uint32_t h = b.qh[ib];
  const int ls = static_cast<int>(2 * ((h >> 12) & 7) + 1);
  const __m256i grid = grid4x8(kIq1sGrid[q[0] | ((h << 8) & 0x700)], kIq1sGrid[q[1] | ((h << 5) & 0x700)],
                               kIq1sGrid[q[2] | ((h << 2) & 0x700)], kIq1sGrid[q[3] | ((h >> 1) & 0x700)]);
  const auto shift = static_cast<char>(1 - 2 * static_cast<int>(h >> 15));  // arithmetic: the bit is data, not a branch
  return {iq1_eighths(grid, _mm256_set1_epi8(shift)), _mm256_setzero_si256(), ls, ls};
}

inline IqGroup iq_group(const BlockIQ1_M& b, int ib, uint32_t scale_word) {
  const uint8_t* q = b.qs + 4 * ib;
  const uint32_t h0 = b.qh[2 * ib], h1 = b.qh[2 * ib + 1];
  const __m256i grid = grid4x8(kIq1sGrid[q[0] | ((h0 << 8) & 0x700)], kIq1sGrid[q[1] | ((h0 << 4) & 0x700)],
                               kIq1sGrid[q[2] | ((h1 << 8) & 0x700)], kIq1sGrid[q[3] | ((h1 << 4) & 0x700)]);
  // +1 or -1 in every byte of a group: all-ones where the bit is set, OR 1 (no branch: the bits are data).
  const auto ones = [](uint32_t bit) { return -static_cast<int64_t>(bit); };
  const __m256i shifts = _mm256_or_si256(
      _mm256_setr_epi64x(ones((h0 >> 3) & 1), ones((h0 >> 7) & 1), ones((h1 >> 3) & 1), ones((h1 >> 7) & 1)),
      _mm256_set1_epi8(1));
  const uint32_t s = scale_word >> (6 * (ib % 2));
  return {iq1_eighths(grid, shifts), _mm256_setzero_si256(), static_cast<int>(2 * (s & 7) + 1), static_cast<int>(2 * ((s >> 3) & 7) + 1)};
}

inline int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// Integer sums per block (exact), then the scalar reference's one float
// multiply-add per block: the result equals the scalar table's bit for bit.
template <typename Block, int T>
void dot_iq(const void* wv, const void* const* xv, int64_t n, float* out) {
  const auto* w = static_cast<const Block*>(wv);
  constexpr bool kSigned = std::is_same_v<Block, BlockIQ1_S> || std::is_same_v<Block, BlockIQ1_M>;
  float sum[T] = {};
  for (int64_t i = 0; i < n / kQK_K; i++) {
    __m256i acc[T];
    for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_si256();
    uint16_t words[4] = {};
    if constexpr (std::is_same_v<Block, BlockIQ1_M>) std::memcpy(words, w[i].scales, 8);
    for (int ib = 0; ib < 8; ib++) {
      IqGroup g;
      if constexpr (std::is_same_v<Block, BlockIQ1_M>) g = iq_group(w[i], ib, words[ib / 2]);
      else g = iq_group(w[i], ib);
      const __m256i scale = pair_scales(g.ls0, g.ls1);
      for (int t = 0; t < T; t++) {
        const __m256i x = load256(static_cast<const BlockQ8_K*>(xv[t])[i].qs + 32 * ib);
        const __m256i d = kSigned ? dot_s8s8(_mm256_setzero_si256(), g.level, x)
                                  : dot_u8s8(_mm256_setzero_si256(), g.level, _mm256_sign_epi8(x, g.sign));
        acc[t] = _mm256_add_epi32(acc[t], _mm256_mullo_epi32(d, scale));
      }
    }
    const float dw = iq_block_scale(w[i]);
    for (int t = 0; t < T; t++)
      sum[t] = std::fma(dw * static_cast<const BlockQ8_K*>(xv[t])[i].d, static_cast<float>(hsum_epi32(acc[t])), sum[t]);
  }
  for (int t = 0; t < T; t++) out[t] = sum[t];
}

template <typename Block, int T>
constexpr QTypeDots iq_entry(GgmlType type) {
  return {type, dot_iq<Block, 1>, dot_iq<Block, T>};
}

template <int T>
constexpr std::array<QTypeDots, 15> simd_qdot_entries() {
  return {{
      {GgmlType::Q4_1, dot_q4q5_1<false, BlockQ4_1, 1>, dot_q4q5_1<false, BlockQ4_1, T>},
      {GgmlType::Q5_0, dot_signed32<Signed32::Q5_0, BlockQ5_0, 1>,
       dot_signed32<Signed32::Q5_0, BlockQ5_0, T>},
      {GgmlType::Q5_1, dot_q4q5_1<true, BlockQ5_1, 1>, dot_q4q5_1<true, BlockQ5_1, T>},
      {GgmlType::IQ4_NL, dot_signed32<Signed32::IQ4_NL, BlockIQ4_NL, 1>,
       dot_signed32<Signed32::IQ4_NL, BlockIQ4_NL, T>},
      {GgmlType::MXFP4, dot_signed32<Signed32::MXFP4, BlockMXFP4, 1>,
       dot_signed32<Signed32::MXFP4, BlockMXFP4, T>},
      {GgmlType::Q2_K, dot_q23_K<false, BlockQ2_K, 1>, dot_q23_K<false, BlockQ2_K, T>},
      {GgmlType::Q3_K, dot_q23_K<true, BlockQ3_K, 1>, dot_q23_K<true, BlockQ3_K, T>},
      {GgmlType::IQ4_XS, dot_iq4_xs<1>, dot_iq4_xs<T>},
      iq_entry<BlockIQ2_XXS, T>(GgmlType::IQ2_XXS),
      iq_entry<BlockIQ2_XS, T>(GgmlType::IQ2_XS),
      iq_entry<BlockIQ2_S, T>(GgmlType::IQ2_S),
      iq_entry<BlockIQ3_XXS, T>(GgmlType::IQ3_XXS),
      iq_entry<BlockIQ3_S, T>(GgmlType::IQ3_S),
      iq_entry<BlockIQ1_S, T>(GgmlType::IQ1_S),
      iq_entry<BlockIQ1_M, T>(GgmlType::IQ1_M),
  }};
}

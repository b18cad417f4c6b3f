// The AVX-512 pieces the packed kernels share (packed_q8_avx512vnni.cpp and the AMX files): the
// weights of a block unpacked to unsigned bytes in the packed layout, a block's scales, row masks.
// Included inside each file's anonymous namespace, after <immintrin.h> and kernels/packed_q8.h, as
// qdot_simd.h is: each ISA's file keeps its own copy.
// NOLINTBEGIN(misc-definitions-in-headers)

constexpr int G = PackedWeight::kRowsPerGroup;

using PA = PackedActivations;

inline __m512i broadcast_i32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

inline __m512 broadcast_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_ps(v);
}

template <PackedKind W>
constexpr bool kEightBit = W == PackedKind::Q8_0;
template <PackedKind W>
constexpr bool kHasMin = PackedWeight::has_min_of(W);
template <PackedKind W>
constexpr bool kHasQh = PackedWeight::has_qh_of(W);
template <PackedKind W>
constexpr bool kIntegerScaled = PackedWeight::integer_scaled_of(W);
template <PackedKind W>
constexpr bool kIq4Table = W == PackedKind::IQ4_NL || W == PackedKind::IQ4_XS;

// A 4-bit table shifted by 128 to unsigned levels, for vpshufb.
struct Table128 {
  alignas(16) uint8_t v[16];
  constexpr explicit Table128(const int8_t* t) : v{} {
    for (int i = 0; i < 16; i++) v[i] = static_cast<uint8_t>(t[i] + 128);
  }
};
constexpr Table128 kIq4nl128(kIq4nlValues), kMxfp4128(kMxfp4Values);

// The block's unsigned weights: w[k] lane i = levels of elements 4k..4k+3 of row i.
// high: the block's high bits for the 16 rows (Q5_0/Q5_1/Q5_K's fifth bits, Q6_K's two words of bits 4-5).
template <PackedKind W>
inline void load_block(const uint8_t* q, const uint8_t* high, __m512i* w) {
  if constexpr (kEightBit<W>) {
    for (int k = 0; k < 8; k++) w[k] = _mm512_loadu_si512(q + 64 * k);
  } else {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    __m512i qh = _mm512_setzero_si512(), qh2 = _mm512_setzero_si512(), table = _mm512_setzero_si512();
    if constexpr (kHasQh<W> || W == PackedKind::Q5_K || W == PackedKind::Q6_K) qh = _mm512_loadu_si512(high);
    if constexpr (W == PackedKind::Q6_K) qh2 = _mm512_loadu_si512(high + 64);
    if constexpr (kIq4Table<W> || W == PackedKind::MXFP4)
      table = _mm512_broadcast_i32x4(
          _mm_load_si128(reinterpret_cast<const __m128i*>(kIq4Table<W> ? kIq4nl128.v : kMxfp4128.v)));
    for (int k = 0; k < 4; k++) {
      const __m512i v = _mm512_loadu_si512(q + 64 * k);
      __m512i lo = _mm512_and_si512(v, low4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
      if constexpr (kHasQh<W> || W == PackedKind::Q5_K) {
        // Bit 4 of byte i: element 4k + i's fifth bit at bit 8i + k, element 16 + 4k + i's at 8i + 4 + k.
        const __m512i b4 = _mm512_set1_epi8(0x10);
        lo = _mm512_or_si512(lo, _mm512_and_si512(_mm512_slli_epi32(qh, 4 - k), b4));
        hi = _mm512_or_si512(hi, _mm512_and_si512(_mm512_srli_epi32(qh, k), b4));
      }
      if constexpr (W == PackedKind::Q6_K) {
        // Bits 4-5 of byte i: element 16hf + 4k + i's at bits 8i + 2k of half hf's word.
        const __m512i b45 = _mm512_set1_epi8(0x30);
        auto up = [&](__m512i h) { return k < 3 ? _mm512_slli_epi32(h, 4 - 2 * k) : _mm512_srli_epi32(h, 2); };
        lo = _mm512_or_si512(lo, _mm512_and_si512(up(qh), b45));
        hi = _mm512_or_si512(hi, _mm512_and_si512(up(qh2), b45));
      }
      if constexpr (kIq4Table<W> || W == PackedKind::MXFP4) {
        lo = _mm512_shuffle_epi8(table, lo);
        hi = _mm512_shuffle_epi8(table, hi);
      }
      w[k] = lo;
      w[k + 4] = hi;
    }
  }
}

// Lane i's int16 pair (lo_i, hi_i) from two vectors of int32 lanes within int16 range: vpdpwssd's
// operand for a block's two half sums.
inline __m512i int16_pairs(__m512i lo, __m512i hi) {
  return _mm512_or_si512(_mm512_and_si512(lo, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(hi, 16));
}

// A kind's scales of block b for the 16 rows (MXFP4: ggml's half of E8M0, 2^(e - 128);
// IQ4_XS: d * (ls - 32) from its super-block's header, as PackedWeight::block_scale).
template <PackedKind W>
inline __m512 block_scale(const uint8_t* hdr, int64_t b) {
  if constexpr (W == PackedKind::IQ4_XS) {
    const int j = static_cast<int>(b % 8);
    const __m512i sh = _mm512_cvtepu16_epi32(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hdr + PackedWeight::kIq4xsScalesHOffset)));
    const __m512i sl = _mm512_loadu_si512(hdr + PackedWeight::kIq4xsScalesLOffset);
    const __m512i ls = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(sl, 4 * j), _mm512_set1_epi32(0xF)),
                                       _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(sh, 2 * j), _mm512_set1_epi32(3)), 4));
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(hdr)));
    return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(ls, _mm512_set1_epi32(32))));
  } else if constexpr (W == PackedKind::MXFP4) {
    const __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(hdr)));
    const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i tiny = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);  // e < 2: subnormal
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2)), normal, tiny));
  } else {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(hdr)));
  }
}

// Q2_K's/Q3_K's half hf of a block: w[sh] lane i = levels of elements 16hf + 4sh..16hf + 4sh + 3 of row i
// (2-bit planes; Q3_K's third bits from `high`, the block's word per row).
template <PackedKind W>
inline void load_planes(const uint8_t* q, __m512i high, int hf, __m512i* w) {
  const __m512i two_bits = _mm512_set1_epi8(0x03), bit2 = _mm512_set1_epi8(0x04);
  const __m512i v = _mm512_loadu_si512(q + 64 * hf);
  for (int sh = 0; sh < 4; sh++) {
    w[sh] = _mm512_and_si512(_mm512_srli_epi16(v, 2 * sh), two_bits);
    if constexpr (W == PackedKind::Q3_K) {
      const int c = 4 * hf + sh;  // the third bit's position in each byte of `high`
      const __m512i hb = c >= 2 ? _mm512_srli_epi32(high, c - 2) : _mm512_slli_epi32(high, 2 - c);
      w[sh] = _mm512_or_si512(w[sh], _mm512_and_si512(hb, bit2));
    }
  }
}

// The lanes of the 16-row group starting at row r that hold real rows.
inline __mmask16 row_mask(const PackedWeight& pw, int64_t r) {
  return pw.rows - r >= G ? __mmask16(0xFFFF) : __mmask16((1u << (pw.rows - r)) - 1);
}

// Q3_K's/Q6_K's scales x -zero level meet the activations' half sums: the int16 pairs of the scales,
// shifted and negated in 16-bit lanes (within int16: |scale| <= 128, the zero level <= 32; no vpmulld).
template <PackedKind W>
inline __m512i kq_times_minus_zero(__m512i pairs) {
  constexpr int32_t kZero = PackedWeight::zero_level_of(W);
  static_assert(std::has_single_bit(static_cast<uint32_t>(kZero)) || kZero == 0, "the zero level is a power of two");
  constexpr int kZeroShift = kZero == 0 ? 0 : std::countr_zero(static_cast<uint32_t>(kZero));
  return _mm512_sub_epi16(_mm512_setzero_si512(), _mm512_slli_epi16(pairs, kZeroShift));
}

// A k-quant sub-block's integer scales for the 16 rows: bytes, signed where the format's are.
template <PackedKind W>
inline __m512i kq_scales16(const uint8_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return PackedWeight::has_kmin_of(W) ? _mm512_cvtepu8_epi32(v) : _mm512_cvtepi8_epi32(v);
}

// NOLINTEND(misc-definitions-in-headers)

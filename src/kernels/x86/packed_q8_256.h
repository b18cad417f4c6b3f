// The body of the 256-bit repacked kernels (packed_q8.h), included once per
// instruction set by the file that names it, inside its own anonymous namespace:
//   packed_q8_avx2.cpp    KESTREL_PACKED_DPBUSD 0: vpmaddubsw + vpmaddwd
//   packed_q8_avxvnni.cpp KESTREL_PACKED_DPBUSD 1: AVX-VNNI's VEX vpdpbusd
//   packed_q8_avx512vnni.cpp: the same with the EVEX encoding (AVX-512 VL +
//     VNNI), so that a CPU with AVX-512 VNNI tests what an AVX-VNNI CPU runs.
// KESTREL_DPBUSD256(acc, u8, s8) names the instruction where it is 1.
//
// A 256-bit register holds half a row group: the 64 bytes of one step of 16
// rows are two vectors, rows 0-7 and rows 8-15. Without vpdpbusd the dots are
// vpmaddubsw (unsigned weight bytes x signed activation bytes, pairs summed to
// int16) and vpmaddwd (int16 pairs summed to int32). vpmaddubsw saturates, so
// each kind keeps its products in int16 range:
//   - the 4-bit kinds (levels 0..15) add all 8 products of a block in int16
//     lanes (16 elements x 15 x 127 < 2^15) before one vpmaddwd;
//   - the 5-bit ones (0..31) and MXFP4 (its table shifted by 16, not 128:
//     4..28) four, Q6_K (0..63) two;
//   - Q8_0 and the IQ4 tables (whose levels reach 255 as stored unsigned)
//     multiply signed: |w| x sign(x, w), each pair within int16, one
//     vpmaddwd per product;
// and the k-quants' vpmaddwd multiplies by the sub-block's integer scale
// instead of by ones (also where vpdpbusd exists: it would need a 32-bit
// multiply per sub-block instead). With vpdpbusd the block formats sum in
// int32 directly, their levels unsigned as the AVX-512 kernels store them.
// The integer sums are the reference's exactly, and the float steps are its
// order, so results equal packed_gemm_reference bit for bit.
//
// Micro-kernels: batches run half a group (8 rows) x 4 tokens, the half's
// unpacked weights serving four tokens; a single token runs both halves
// (decode streams each cache line once).

constexpr bool kDpbusd = KESTREL_PACKED_DPBUSD;

constexpr int G = PackedWeight::kRowsPerGroup;
constexpr int kHalf = G / 2;  // rows per vector
using PA = PackedActivations;
using PW = PackedWeight;

inline __m256i broadcast_i32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

inline __m256 broadcast_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_ps(v);
}

inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m128i load128(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
inline __m128i load64(const uint8_t* p) { return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)); }

template <PackedKind W>
constexpr bool kEightBit = W == PackedKind::Q8_0;
template <PackedKind W>
constexpr bool kIq4Table = W == PackedKind::IQ4_NL || W == PackedKind::IQ4_XS;
// The kinds whose weights multiply as signed bytes (see the top of the file).
template <PackedKind W>
constexpr bool kSigned = !kDpbusd && (kEightBit<W> || kIq4Table<W>);
template <PackedKind W>
constexpr bool kHasMin = PW::has_min_of(W);
template <PackedKind W>
constexpr bool kHasQh = PW::has_qh_of(W);
template <PackedKind W>
constexpr bool kIntegerScaled = PW::integer_scaled_of(W);
// How many vpmaddubsw results an int16 lane can add before vpmaddwd (unsigned kinds; the largest level x 127
// x 2 products a lane x this stays below 2^15).
template <PackedKind W>
constexpr int kRun = W == PackedKind::Q6_K                                           ? 2
                     : (kHasQh<W> || W == PackedKind::Q5_K || W == PackedKind::MXFP4) ? 4
                                                                                      : 8;
// MXFP4's levels as stored here: its table + 16 (the activations' bias is for + 128); with vpdpbusd the
// tables are unsigned as the AVX-512 kernels have them (+ 128).
constexpr int kMxfp4Offset = kDpbusd ? 128 : 16;

struct Table16 {
  alignas(16) int8_t v[16];
  constexpr Table16(const int8_t* t, int add) : v{} {
    for (int i = 0; i < 16; i++) v[i] = static_cast<int8_t>(t[i] + add);
  }
};
constexpr Table16 kIq4nlSigned(kIq4nlValues, kDpbusd ? 128 : 0), kMxfp4Shifted(kMxfp4Values, kMxfp4Offset);

// One step (k = 0..3) of a 32-element block for half h of the group: two vectors whose lane i holds 4
// levels of row 8h + i, and where their activations sit in the token's 32 bytes. 4-bit kinds: the low
// nibbles (elements 4k..4k+3) and the high ones (16 + 4k..); Q8_0: elements 8k.. and 8k + 4...
// high: the block's high bits (Q5's fifth bits, Q6_K's two words of bits 4-5), for all 16 rows.
template <PackedKind W>
inline void load_step(const uint8_t* q, const uint8_t* high, int h, int k, __m256i& w0, __m256i& w1, int& x0,
                      int& x1) {
  if constexpr (kEightBit<W>) {
    // Stored unsigned (q + 128): signed again for vpmaddubsw; vpdpbusd takes them as they are.
    const __m256i flip = _mm256_set1_epi8(static_cast<char>(kDpbusd ? 0 : 0x80));
    w0 = _mm256_xor_si256(load256(q + 64 * (2 * k) + 32 * h), flip);
    w1 = _mm256_xor_si256(load256(q + 64 * (2 * k + 1) + 32 * h), flip);
    x0 = 8 * k, x1 = 8 * k + 4;
  } else {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const __m256i v = load256(q + 64 * k + 32 * h);
    __m256i lo = _mm256_and_si256(v, low4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
    if constexpr (kHasQh<W> || W == PackedKind::Q5_K) {
      // Bit 4 of byte i: element 4k + i's fifth bit at bit 8i + k, element 16 + 4k + i's at 8i + 4 + k.
      const __m256i qh = load256(high + 32 * h), b4 = _mm256_set1_epi8(0x10);
      lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_sll_epi32(qh, _mm_cvtsi32_si128(4 - k)), b4));
      hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_srl_epi32(qh, _mm_cvtsi32_si128(k)), b4));
    }
    if constexpr (W == PackedKind::Q6_K) {
      // Bits 4-5 of byte i: element 16hf + 4k + i's at bits 8i + 2k of half hf's word.
      const __m256i b45 = _mm256_set1_epi8(0x30);
      auto up = [&](__m256i word) {
        return k < 3 ? _mm256_sll_epi32(word, _mm_cvtsi32_si128(4 - 2 * k)) : _mm256_srli_epi32(word, 2);
      };
      lo = _mm256_or_si256(lo, _mm256_and_si256(up(load256(high + 32 * h)), b45));
      hi = _mm256_or_si256(hi, _mm256_and_si256(up(load256(high + 64 + 32 * h)), b45));
    }
    if constexpr (kIq4Table<W> || W == PackedKind::MXFP4) {
      const __m256i table = _mm256_broadcastsi128_si256(
          _mm_load_si128(reinterpret_cast<const __m128i*>(kIq4Table<W> ? kIq4nlSigned.v : kMxfp4Shifted.v)));
      lo = _mm256_shuffle_epi8(table, lo);
      hi = _mm256_shuffle_epi8(table, hi);
    }
    w0 = lo, w1 = hi;
    x0 = 4 * k, x1 = 16 + 4 * k;
  }
}

// The int16 pair sums of weight vector w (as load_step gives it) times the broadcast activation word x.
template <PackedKind W>
inline __m256i products(__m256i w, __m256i x) {
  if constexpr (kSigned<W>) return _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
  else return _mm256_maddubs_epi16(w, x);
}

inline __m256i pairs_to_i32(__m256i p) { return _mm256_madd_epi16(p, _mm256_set1_epi16(1)); }

// A kind's scales of block b for rows 8h..8h+7 (MXFP4: ggml's half of E8M0, 2^(e - 128); IQ4_XS: d * (ls - 32)
// from its super-block's header, as PackedWeight::block_scale).
template <PackedKind W>
inline __m256 block_scale(const uint8_t* hdr, int64_t b, int h) {
  if constexpr (W == PackedKind::IQ4_XS) {
    const int j = static_cast<int>(b % 8);
    const __m256i sh = _mm256_cvtepu16_epi32(load128(hdr + PW::kIq4xsScalesHOffset + 16 * h));
    const __m256i sl = load256(hdr + PW::kIq4xsScalesLOffset + 32 * h);
    const __m256i ls = _mm256_or_si256(
        _mm256_and_si256(_mm256_srl_epi32(sl, _mm_cvtsi32_si128(4 * j)), _mm256_set1_epi32(0xF)),
        _mm256_slli_epi32(_mm256_and_si256(_mm256_srl_epi32(sh, _mm_cvtsi32_si128(2 * j)), _mm256_set1_epi32(3)), 4));
    const __m256 d = _mm256_cvtph_ps(load128(hdr + 16 * h));
    return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(ls, _mm256_set1_epi32(32))));
  } else if constexpr (W == PackedKind::MXFP4) {
    const __m256i e = _mm256_cvtepu8_epi32(load64(hdr + 8 * h));
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i tiny = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);  // e < 2: subnormal
    return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, tiny, _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e)));
  } else {
    return _mm256_cvtph_ps(load128(hdr + 16 * h));
  }
}

// What the activations' stored bias (-128, -8 or -16 x the block's sum) becomes for how this file multiplies:
// nothing for the signed kinds, -16 x the sum for MXFP4.
template <PackedKind W>
inline __m256i bias_of(const uint8_t* a, int t) {
  if constexpr (kSigned<W>) return _mm256_setzero_si256();
  const __m256i bias = broadcast_i32(a + PA::kBiasOffset + 4 * t);
  if constexpr (W == PackedKind::MXFP4 && kMxfp4Offset != 128)
    return _mm256_srai_epi32(bias, 7 - std::countr_zero(unsigned(kMxfp4Offset)));
  return bias;
}

// Eight bytes of per-row integers (rows 8h.., one byte a row) as int16 pairs (v, v) per lane: vpmaddwd's
// multiplier of a lane's two pair sums.
template <bool kSignedBytes>
inline __m256i byte_pairs(__m128i bytes) {
  const __m128i twice = _mm_unpacklo_epi8(bytes, bytes);
  return kSignedBytes ? _mm256_cvtepi8_epi16(twice) : _mm256_cvtepu8_epi16(twice);
}
// Two such byte runs as the pair (lo_i, hi_i) per lane.
template <bool kSignedBytes>
inline __m256i byte_pairs(__m128i lo, __m128i hi) {
  const __m128i both = _mm_unpacklo_epi8(lo, hi);
  return kSignedBytes ? _mm256_cvtepi8_epi16(both) : _mm256_cvtepu8_epi16(both);
}

inline void store_rows(float* y, __m256 v, int64_t valid) {
  if (valid >= kHalf) {
    _mm256_storeu_ps(y, v);
  } else if (valid > 0) {
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    _mm256_maskstore_ps(y, _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(valid)), lanes), v);
  }
}

// How far ahead the super-block kinds prefetch their units (as the AVX-512 kernels).
constexpr int kPrefetchUnits = 2;
template <PackedKind W>
inline void prefetch_unit_ahead(const uint8_t* unit, int64_t j, const uint8_t* end) {
  constexpr size_t kUnit = PW::unit_bytes_of(W), kSlice = kUnit / 8;
  const uint8_t* p = unit + kPrefetchUnits * kUnit + j * kSlice;
  for (size_t i = 0; i < kSlice; i += 64)
    if (p + i < end) _mm_prefetch(reinterpret_cast<const char*>(p + i), _MM_HINT_T0);
}

// The 32-element block formats and IQ4_XS: halves h0..h0+NH-1 of group g x tokens T0..T0+T-1 of a token tile.
template <PackedKind W, int T0, int T, int NH>
void block_kernel(const PackedWeight& pw, int64_t g, int h0, const PackedActivations& x, int64_t tile, float* y,
                  int64_t ldy, bool prefetch) {
  constexpr size_t kHeader = PW::header_bytes_of(W), kQuants = PW::quant_bytes_of(W);
  constexpr int kPerUnit = PW::blocks_per_unit_of(W);
  constexpr size_t kUnitHeader = PW::unit_header_bytes_of(W), kUnit = PW::unit_bytes_of(W);
  const uint8_t* first = pw.data + g * pw.group_bytes();
  const uint8_t* matrix_end = pw.data + pw.n_groups * pw.group_bytes();
  const uint8_t* a = x.block(tile, 0);
  __m256 acc[NH][T];
  for (int i = 0; i < NH; i++)
    for (int t = 0; t < T; t++) acc[i][t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < pw.n_blocks; b++, a += PA::kBytesPerBlock) {
    const uint8_t* unit = first + (b / kPerUnit) * kUnit;
    const uint8_t* hdr = kPerUnit == 8 ? unit : unit + (b % 2) * kHeader;
    const uint8_t* q = unit + kUnitHeader + (b % kPerUnit) * kQuants;
    if constexpr (kPerUnit == 8)
      if (prefetch) prefetch_unit_ahead<W>(unit, b % 8, matrix_end);
    const uint8_t* qh = nullptr;
    if constexpr (kHasQh<W>) qh = hdr + PW::qh_offset_of(W);
    __m256i dot[NH][T], part[NH][T];
    for (int i = 0; i < NH; i++)
      for (int t = 0; t < T; t++) dot[i][t] = bias_of<W>(a, T0 + t), part[i][t] = _mm256_setzero_si256();
    for (int k = 0; k < 4; k++) {
      for (int i = 0; i < NH; i++) {
        __m256i w0, w1;
        int x0, x1;
        load_step<W>(q, qh, h0 + i, k, w0, w1, x0, x1);
        for (int t = 0; t < T; t++) {
          const uint8_t* at = a + kQK8_0 * (T0 + t);
          if constexpr (kDpbusd) {
            dot[i][t] = KESTREL_DPBUSD256(KESTREL_DPBUSD256(dot[i][t], w0, broadcast_i32(at + x0)), w1,
                                          broadcast_i32(at + x1));
            continue;
          }
          const __m256i p0 = products<W>(w0, broadcast_i32(at + x0)), p1 = products<W>(w1, broadcast_i32(at + x1));
          if constexpr (kSigned<W>) {
            dot[i][t] = _mm256_add_epi32(dot[i][t], _mm256_add_epi32(pairs_to_i32(p0), pairs_to_i32(p1)));
          } else {
            part[i][t] = _mm256_add_epi16(part[i][t], _mm256_add_epi16(p0, p1));
            if ((2 * (k + 1)) % kRun<W> == 0) {
              dot[i][t] = _mm256_add_epi32(dot[i][t], pairs_to_i32(part[i][t]));
              part[i][t] = _mm256_setzero_si256();
            }
          }
        }
      }
    }
    for (int i = 0; i < NH; i++) {
      const __m256 dw = block_scale<W>(hdr, b, h0 + i);
      __m256 mw = _mm256_setzero_ps();
      if constexpr (kHasMin<W>) mw = _mm256_cvtph_ps(load128(hdr + PW::kMinsOffset + 16 * (h0 + i)));
      for (int t = 0; t < T; t++) {
        const __m256 dx = broadcast_f32(a + PA::kScaleOffset + 4 * (T0 + t));
        acc[i][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[i][t]), _mm256_mul_ps(dw, dx), acc[i][t]);
        if constexpr (kHasMin<W>) acc[i][t] = _mm256_fmadd_ps(mw, broadcast_f32(a + PA::kSumOffset + 4 * (T0 + t)), acc[i][t]);
      }
    }
  }
  const int64_t t0 = tile * PA::kTokensPerTile + T0;
  for (int i = 0; i < NH; i++) {
    const int64_t r = g * G + (h0 + i) * kHalf;
    for (int t = 0; t < T; t++) store_rows(y + (t0 + t) * ldy + r, acc[i][t], pw.rows - r);
  }
}

// The k-quants (packed_gemm_reference_integer_scaled's arithmetic, as the AVX-512 kernel): per super-block
// and token, the sub-blocks' int16 pair sums times their integer scales in vpmaddwd, Q3_K's and Q6_K's zero
// levels and Q2_K's minimums against the activations' half sums, Q4_K's/Q5_K's minimums against their pair
// sums, then one FMA each.
template <PackedKind W, int T0, int T, int NH>
void integer_scaled_kernel(const PackedWeight& pw, int64_t g, int h0, const PackedActivations& x, int64_t tile,
                           float* y, int64_t ldy, bool prefetch) {
  constexpr bool kPerBlock = PW::scale_per_block_of(W);
  constexpr bool kNibbles = kPerBlock || W == PackedKind::Q6_K;
  constexpr bool kThree = W == PackedKind::Q3_K, kMin = PW::has_kmin_of(W);
  constexpr int32_t kZero = PW::zero_level_of(W);
  static_assert(std::has_single_bit(static_cast<uint32_t>(kZero)) || kZero == 0, "the zero level is a power of two");
  constexpr int kZeroShift = kZero == 0 ? 0 : std::countr_zero(static_cast<uint32_t>(kZero));
  constexpr size_t kScales = PW::sub_scales_offset_of(W), kMins = PW::kQ4kMinsOffset;
  constexpr size_t kHigh = PW::high_bits_offset_of(W), kHighBytes = 64 * PW::high_words_of(W);
  constexpr size_t kHeader = PW::unit_header_bytes_of(W), kQuants = PW::quant_bytes_of(W), kUnit = PW::unit_bytes_of(W);
  auto times_minus_zero = [](__m256i pairs) {
    return _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(pairs, kZeroShift));
  };
  __m256 acc[NH][T];
  for (int i = 0; i < NH; i++)
    for (int t = 0; t < T; t++) acc[i][t] = _mm256_setzero_ps();
  const uint8_t* unit = pw.data + g * pw.group_bytes();
  const uint8_t* matrix_end = pw.data + pw.n_groups * pw.group_bytes();
  for (int64_t b0 = 0; b0 < pw.n_blocks; b0 += 8, unit += kUnit) {
    __m256i isum[NH][T], msum[NH][T];
    for (int i = 0; i < NH; i++)
      for (int t = 0; t < T; t++) isum[i][t] = msum[i][t] = _mm256_setzero_si256();
    for (int j = 0; j < 8; j++) {
      if (prefetch) prefetch_unit_ahead<W>(unit, j, matrix_end);
      const uint8_t* a = x.block(tile, b0 + j);
      const uint8_t* q = unit + kHeader + j * kQuants;
      for (int i = 0; i < NH; i++) {
        const int h = h0 + i;
        const uint8_t* sc_bytes = unit + kScales + 8 * h;  // sub-block s's bytes for these rows at + 16 s
        if constexpr (kNibbles) {
          // Q4_K/Q5_K: one scale for the block's 32 elements; Q6_K: one per 16 (the low nibbles' and the high).
          __m256i sc_lo, sc_hi;
          if constexpr (kPerBlock) {
            sc_lo = sc_hi = byte_pairs<false>(load64(sc_bytes + 16 * j));
          } else {
            sc_lo = byte_pairs<true>(load64(sc_bytes + 32 * j));
            sc_hi = byte_pairs<true>(load64(sc_bytes + 32 * j + 16));
          }
          __m256i part_lo[T], part_hi[T];
          for (int t = 0; t < T; t++) part_lo[t] = part_hi[t] = _mm256_setzero_si256();
          for (int k = 0; k < 4; k++) {
            __m256i w0, w1;
            int x0, x1;
            load_step<W>(q, unit + kHigh + kHighBytes * j, h, k, w0, w1, x0, x1);
            for (int t = 0; t < T; t++) {
              const uint8_t* at = a + kQK8_0 * (T0 + t);
              part_lo[t] = _mm256_add_epi16(part_lo[t], products<W>(w0, broadcast_i32(at + x0)));
              part_hi[t] = _mm256_add_epi16(part_hi[t], products<W>(w1, broadcast_i32(at + x1)));
              // Each part adds one product a step: flush at half the run (Q4_K's two parts meet its scale
              // once, in one int16 sum of both).
              if ((k + 1) % (kRun<W> / 2) == 0) {
                if constexpr (kPerBlock && kRun<W> == 8) {
                  isum[i][t] = _mm256_add_epi32(isum[i][t], _mm256_madd_epi16(_mm256_add_epi16(part_lo[t], part_hi[t]), sc_lo));
                } else {
                  isum[i][t] = _mm256_add_epi32(isum[i][t], _mm256_add_epi32(_mm256_madd_epi16(part_lo[t], sc_lo),
                                                                              _mm256_madd_epi16(part_hi[t], sc_hi)));
                }
                part_lo[t] = part_hi[t] = _mm256_setzero_si256();
              }
            }
          }
          if constexpr (kZero != 0) {
            // Q6_K's zero level: -32 x (sc_lo x sum_lo + sc_hi x sum_hi) against the activations' half sums.
            const __m256i zero_pair =
                times_minus_zero(byte_pairs<true>(load64(sc_bytes + 32 * j), load64(sc_bytes + 32 * j + 16)));
            for (int t = 0; t < T; t++)
              isum[i][t] = _mm256_add_epi32(
                  isum[i][t], _mm256_madd_epi16(zero_pair, broadcast_i32(a + PA::kHalfSumsOffset + 4 * (T0 + t))));
          }
          continue;
        }
        // Q2_K/Q3_K: two 16-element sub-blocks of 2-bit planes (Q3_K's third bits beside).
        __m256i high = _mm256_setzero_si256();
        if constexpr (kThree) high = load256(unit + kHigh + 64 * j + 32 * h);
        const __m128i sub0 = load64(sc_bytes + 32 * j), sub1 = load64(sc_bytes + 32 * j + 16);
        __m256i sc[2], offsets;
        if constexpr (kMin) {  // Q2_K: scale | min << 4
          const __m128i lo4 = _mm_set1_epi8(0x0F);
          sc[0] = byte_pairs<false>(_mm_and_si128(sub0, lo4));
          sc[1] = byte_pairs<false>(_mm_and_si128(sub1, lo4));
          offsets = byte_pairs<false>(_mm_and_si128(_mm_srli_epi16(sub0, 4), lo4),
                                      _mm_and_si128(_mm_srli_epi16(sub1, 4), lo4));
        } else {
          sc[0] = byte_pairs<true>(sub0);
          sc[1] = byte_pairs<true>(sub1);
          offsets = times_minus_zero(byte_pairs<true>(sub0, sub1));
        }
        for (int hf = 0; hf < 2; hf++) {
          const __m256i v = load256(q + 64 * hf + 32 * h);
          __m256i w[4];
          for (int sh = 0; sh < 4; sh++) {
            w[sh] = _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(2 * sh)), _mm256_set1_epi8(0x03));
            if constexpr (kThree) {
              const int c = 4 * hf + sh;  // the third bit's position in each byte of `high`
              const __m256i hb = c >= 2 ? _mm256_srl_epi32(high, _mm_cvtsi32_si128(c - 2))
                                        : _mm256_sll_epi32(high, _mm_cvtsi32_si128(2 - c));
              w[sh] = _mm256_or_si256(w[sh], _mm256_and_si256(hb, _mm256_set1_epi8(0x04)));
            }
          }
          for (int t = 0; t < T; t++) {
            const uint8_t* at = a + kQK8_0 * (T0 + t) + 16 * hf;
            __m256i part = _mm256_setzero_si256();
            for (int sh = 0; sh < 4; sh++) part = _mm256_add_epi16(part, products<W>(w[sh], broadcast_i32(at + 4 * sh)));
            isum[i][t] = _mm256_add_epi32(isum[i][t], _mm256_madd_epi16(part, sc[hf]));
          }
        }
        for (int t = 0; t < T; t++) {
          const __m256i halves = _mm256_madd_epi16(offsets, broadcast_i32(a + PA::kHalfSumsOffset + 4 * (T0 + t)));
          if constexpr (kMin) msum[i][t] = _mm256_add_epi32(msum[i][t], halves);
          else isum[i][t] = _mm256_add_epi32(isum[i][t], halves);
        }
      }
    }
    const uint8_t* a0 = x.block(tile, b0);
    for (int i = 0; i < NH; i++) {
      const int h = h0 + i;
      if constexpr (kPerBlock) {
        // The minimums times the blocks' sums, a block pair per vpmaddwd, once per super-block.
        for (int p = 0; p < 4; p++) {
          const __m256i mins = _mm256_cvtepu8_epi16(load128(unit + kMins + 32 * p + 16 * h));
          for (int t = 0; t < T; t++)
            msum[i][t] = _mm256_add_epi32(
                msum[i][t],
                _mm256_madd_epi16(mins, broadcast_i32(x.block(tile, b0 + 2 * p) + PA::kPairSumsOffset + 4 * (T0 + t))));
        }
      }
      const __m256 d = _mm256_cvtph_ps(load128(unit + 16 * h));
      __m256 dmin = _mm256_setzero_ps();
      if constexpr (kMin) dmin = _mm256_cvtph_ps(load128(unit + PW::kMinsOffset + 16 * h));
      for (int t = 0; t < T; t++) {
        const __m256 dx = broadcast_f32(a0 + PA::kScaleOffset + 4 * (T0 + t));
        acc[i][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i][t]), _mm256_mul_ps(d, dx), acc[i][t]);
        if constexpr (kMin)
          acc[i][t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum[i][t]), _mm256_mul_ps(dmin, dx), acc[i][t]);
      }
    }
  }
  const int64_t t0 = tile * PA::kTokensPerTile + T0;
  for (int i = 0; i < NH; i++) {
    const int64_t r = g * G + (h0 + i) * kHalf;
    for (int t = 0; t < T; t++) store_rows(y + (t0 + t) * ldy + r, acc[i][t], pw.rows - r);
  }
}

template <PackedKind W, int T0, int T, int NH>
void tile_kernel(const PackedWeight& pw, int64_t g, int h0, const PackedActivations& x, int64_t tile, float* y,
                 int64_t ldy, bool prefetch) {
  if constexpr (kIntegerScaled<W>) integer_scaled_kernel<W, T0, T, NH>(pw, g, h0, x, tile, y, ldy, prefetch);
  else block_kernel<W, T0, T, NH>(pw, g, h0, x, tile, y, ldy, prefetch);
}

// Tokens T0..T0+n-1 of a token tile in kernels of at most TMax tokens.
template <PackedKind W, int T0, int TMax, int NH>
void tokens(const PackedWeight& pw, int64_t g, int h0, const PackedActivations& x, int64_t tile, int64_t n, float* y,
            int64_t ldy, bool prefetch) {
  if constexpr (TMax > 0 && T0 < PA::kTokensPerTile) {
    if (n >= TMax) {
      tile_kernel<W, T0, TMax, NH>(pw, g, h0, x, tile, y, ldy, prefetch);
      if (n > TMax) tokens<W, T0 + TMax, TMax, NH>(pw, g, h0, x, tile, n - TMax, y, ldy, false);
    } else {
      tokens<W, T0, TMax - 1, NH>(pw, g, h0, x, tile, n, y, ldy, prefetch);
    }
  }
}

template <PackedKind W>
void gemm(const PackedWeight& pw, int64_t g0, int64_t g1, const PackedActivations& x, float* y, int64_t ldy,
          int64_t token_chunk) {
  const int64_t tiles_per_chunk = (token_chunk + PA::kTokensPerTile - 1) / PA::kTokensPerTile;
  for (int64_t tc = 0; tc < x.n_tiles(); tc += tiles_per_chunk) {
    const int64_t tc_end = std::min(x.n_tiles(), tc + tiles_per_chunk);
    for (int64_t g = g0; g < g1; g++) {
      if (x.n_tokens == 1) {
        // Decode: both halves, each cache line of the group read once.
        tile_kernel<W, 0, 1, 2>(pw, g, 0, x, 0, y, ldy, true);
        continue;
      }
      // Batches: a half at a time against 4 tokens; the group stays in L1 for the other half and the tiles.
      for (int h = 0; h < 2; h++)
        for (int64_t i = tc; i < tc_end; i++) {
          const int64_t n = std::min<int64_t>(PA::kTokensPerTile, x.n_tokens - i * PA::kTokensPerTile);
          tokens<W, 0, 4, 1>(pw, g, h, x, i, n, y, ldy, h == 0 && i == tc);
        }
    }
  }
}

void packed_gemm_256(const PackedWeight& w, int64_t g0, int64_t g1, const PackedActivations& x, float* y,
                      int64_t ldy, int64_t token_chunk) {
  token_chunk = std::clamp<int64_t>(token_chunk, 1, 256);
  with_packed_kind(w.kind, [&](auto kind) { gemm<decltype(kind)::value>(w, g0, g1, x, y, ldy, token_chunk); });
}


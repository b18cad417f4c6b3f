// The AMX kernels of the packed weights (packed_q8.h), one body for a Tiles
// interface (amx_tiles.h): the hardware's in packed_q8_amx.cpp, the scalar
// model's in packed_q8_amx_model_avx512vnni.cpp, so this machine's tests run
// the code an AMX CPU runs. Included inside each file's anonymous namespace,
// after packed_q8_512.h (the AVX-512 unpacking it shares with the VNNI kernels).
//
// The weights stay in the VNNI layout, which is already the tile layout:
// a block's 8 vectors [k][16 rows][4 bytes] are the B operand of TDPBSUD
// (K grouped by 4 bytes, 16 rows x 64 bytes; Q8_0's straight from memory,
// the others unpacked by AVX-512 to unsigned bytes in a 512-byte buffer
// once per block and reused for every token tile of the chunk); a token
// tile's activations [8 tokens][32] int8 are the A operand as they are.
// So AMX reads the same packed weights as the VNNI kernels (no second copy),
// which take the small batches (MatmulKernel::tile_min_tokens). Each block's
// int32 tile C[8 tokens][16 rows] is stored, and the per-block scales (the
// k-quants' integer sub-block scales, then one FMA per super-block) applied
// as the VNNI kernels apply them: integer sums are exact, so the results are
// the reference's bit for bit. The k-quants with 16-element sub-blocks
// (Q2_K, Q3_K, Q6_K) run K = 16 per TDPBSUD (two tiles per block), the others
// K = 32.
// NOLINTBEGIN(misc-definitions-in-headers)

// Token tiles per chunk at most (Tuning::kMaxTokenChunk / 8): the accumulators of a chunk live on the stack.
constexpr int kAmxMaxTiles = 32;
// Tile registers: A = tmm0 (tmm2: the high half), B = tmm1 (tmm3), C = tmm4 (tmm5).
constexpr int kTa = 0, kTb = 1, kTaHi = 2, kTbHi = 3, kTc = 4, kTcHi = 5;

template <PackedKind W>
constexpr bool kAmxHalves = PackedWeight::integer_scaled_of(W) && !PackedWeight::scale_per_block_of(W);

template <PackedKind W>
TileConfig amx_config() {
  TileConfig c;
  constexpr int T = PA::kTokensPerTile;
  if constexpr (kAmxHalves<W>) {
    c.shape(kTa, T, 16), c.shape(kTaHi, T, 16);
    c.shape(kTb, 4, 64), c.shape(kTbHi, 4, 64);
    c.shape(kTc, T, 64), c.shape(kTcHi, T, 64);
  } else {
    c.shape(kTa, T, 32), c.shape(kTb, 8, 64), c.shape(kTc, T, 64);
  }
  return c;
}

// C[8 tokens][16 rows] = A (the tile's activations of a block, from byte `offset`) x B (loaded).
template <class Tiles, int C, int A, int B>
inline void amx_block_dot(const uint8_t* a, int offset, int32_t* c) {
  Tiles::template load<A>(a + offset, kQK8_0);
  Tiles::template zero<C>();
  Tiles::template dpbsud<C, A, B>();
  Tiles::template store<C>(c, 64);
}

// The accumulators of token tiles [tile0, tile0 + nt) for one group into y.
inline void amx_store(const PackedWeight& pw, int64_t g, const PackedActivations& x, int64_t tile0, int nt,
                      const float (*acc)[PA::kTokensPerTile][G], float* y, int64_t ldy) {
  const int64_t r = g * G;
  const __mmask16 mask = row_mask(pw, r);
  for (int i = 0; i < nt; i++)
    for (int t = 0; t < PA::kTokensPerTile; t++) {
      const int64_t token = (tile0 + i) * PA::kTokensPerTile + t;
      if (token < x.n_tokens) _mm512_mask_storeu_ps(y + token * ldy + r, mask, _mm512_load_ps(acc[i][t]));
    }
}

// The 32-element block formats and IQ4_XS, one group x token tiles [tile0, tile0 + nt).
template <class Tiles, PackedKind W>
void amx_block_group(const PackedWeight& pw, int64_t g, const PackedActivations& x, int64_t tile0, int nt, float* y,
                     int64_t ldy) {
  constexpr size_t kHeader = PackedWeight::header_bytes_of(W), kQuants = PackedWeight::quant_bytes_of(W);
  constexpr int kPerUnit = PackedWeight::blocks_per_unit_of(W);
  constexpr size_t kUnitHeader = PackedWeight::unit_header_bytes_of(W), kUnit = PackedWeight::unit_bytes_of(W);
  alignas(64) float acc[kAmxMaxTiles][PA::kTokensPerTile][G];
  alignas(64) uint8_t wbuf[512];
  alignas(64) int32_t c[PA::kTokensPerTile][G];
  for (int i = 0; i < nt; i++)
    for (int t = 0; t < PA::kTokensPerTile; t++) _mm512_store_ps(acc[i][t], _mm512_setzero_ps());
  const uint8_t* first = pw.data + g * pw.group_bytes();
  for (int64_t b = 0; b < pw.n_blocks; b++) {
    const uint8_t* unit = first + (b / kPerUnit) * kUnit;
    const uint8_t* hdr = kPerUnit == 8 ? unit : unit + (b % 2) * kHeader;
    const uint8_t* q = unit + kUnitHeader + (b % kPerUnit) * kQuants;
    if constexpr (kEightBit<W>) {
      Tiles::template load<kTb>(q, 64);
    } else {
      __m512i w[8];
      const uint8_t* qh = nullptr;
      if constexpr (kHasQh<W>) qh = hdr + PackedWeight::qh_offset_of(W);
      load_block<W>(q, qh, w);
      for (int k = 0; k < 8; k++) _mm512_store_si512(wbuf + 64 * k, w[k]);
      Tiles::template load<kTb>(wbuf, 64);
    }
    const __m512 dw = block_scale<W>(hdr, b);
    __m512 mw = _mm512_setzero_ps();
    if constexpr (kHasMin<W>)
      mw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(hdr + PackedWeight::kMinsOffset)));
    for (int i = 0; i < nt; i++) {
      const uint8_t* a = x.block(tile0 + i, b);
      amx_block_dot<Tiles, kTc, kTa, kTb>(a, 0, &c[0][0]);
      for (int t = 0; t < PA::kTokensPerTile; t++) {
        const __m512i dot = _mm512_add_epi32(_mm512_load_si512(c[t]), broadcast_i32(a + PA::kBiasOffset + 4 * t));
        const __m512 dx = broadcast_f32(a + PA::kScaleOffset + 4 * t);
        __m512 r = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw, dx), _mm512_load_ps(acc[i][t]));
        if constexpr (kHasMin<W>) r = _mm512_fmadd_ps(mw, broadcast_f32(a + PA::kSumOffset + 4 * t), r);
        _mm512_store_ps(acc[i][t], r);
      }
    }
  }
  amx_store(pw, g, x, tile0, nt, acc, y, ldy);
}

// The k-quants, one group x token tiles [tile0, tile0 + nt): per super-block, each sub-block's int32 tile
// times its integer scale, the zero levels and minimums against the activations' sums (vpdpwssd, as the
// VNNI kernel), then one FMA each per super-block.
template <class Tiles, PackedKind W>
void amx_kquant_group(const PackedWeight& pw, int64_t g, const PackedActivations& x, int64_t tile0, int nt, float* y,
                      int64_t ldy) {
  using PW = PackedWeight;
  constexpr bool kPerBlock = PW::scale_per_block_of(W), kNibbles = kPerBlock || W == PackedKind::Q6_K;
  constexpr bool kMin = PW::has_kmin_of(W);
  constexpr int32_t kZero = PW::zero_level_of(W);
  constexpr size_t kScales = PW::sub_scales_offset_of(W), kMins = PW::kQ4kMinsOffset;
  constexpr size_t kHigh = PW::high_bits_offset_of(W), kHighBytes = 64 * PW::high_words_of(W);
  constexpr size_t kHeader = PW::unit_header_bytes_of(W), kQuants = PW::quant_bytes_of(W), kUnit = PW::unit_bytes_of(W);
  constexpr int T = PA::kTokensPerTile;
  alignas(64) float acc[kAmxMaxTiles][T][G];
  alignas(64) int32_t isum[kAmxMaxTiles][T][G], msum[kAmxMaxTiles][T][G];
  alignas(64) uint8_t wbuf[512];
  alignas(64) int32_t c[T][G], c_hi[T][G];
  for (int i = 0; i < nt; i++)
    for (int t = 0; t < T; t++) _mm512_store_ps(acc[i][t], _mm512_setzero_ps());
  const uint8_t* unit = pw.data + g * pw.group_bytes();
  for (int64_t b0 = 0; b0 < pw.n_blocks; b0 += 8, unit += kUnit) {
    for (int i = 0; i < nt; i++)
      for (int t = 0; t < T; t++) {
        _mm512_store_si512(isum[i][t], _mm512_setzero_si512());
        _mm512_store_si512(msum[i][t], _mm512_setzero_si512());
      }
    for (int j = 0; j < 8; j++) {
      const uint8_t* q = unit + kHeader + j * kQuants;
      __m512i w[8];
      if constexpr (kNibbles) {
        load_block<W>(q, unit + kHigh + kHighBytes * j, w);
      } else {
        __m512i high = _mm512_setzero_si512();
        if constexpr (W == PackedKind::Q3_K) high = _mm512_loadu_si512(unit + kHigh + 64 * j);
        load_planes<W>(q, high, 0, w);
        load_planes<W>(q, high, 1, w + 4);
      }
      for (int k = 0; k < 8; k++) _mm512_store_si512(wbuf + 64 * k, w[k]);
      if constexpr (kPerBlock) {
        Tiles::template load<kTb>(wbuf, 64);
        const __m512i sc = kq_scales16<W>(unit + kScales + 16 * j);
        for (int i = 0; i < nt; i++) {
          amx_block_dot<Tiles, kTc, kTa, kTb>(x.block(tile0 + i, b0 + j), 0, &c[0][0]);
          for (int t = 0; t < T; t++)
            _mm512_store_si512(isum[i][t], _mm512_add_epi32(_mm512_load_si512(isum[i][t]),
                                                            _mm512_mullo_epi32(_mm512_load_si512(c[t]), sc)));
        }
        continue;
      }
      Tiles::template load<kTb>(wbuf, 64);
      Tiles::template load<kTbHi>(wbuf + 256, 64);
      __m512i sc = kq_scales16<W>(unit + kScales + 32 * j), sc_hi = kq_scales16<W>(unit + kScales + 32 * j + 16);
      // What the sub-blocks' activation sums meet (int16 pairs, the first 16 elements low): Q2_K's minimums,
      // Q3_K's and Q6_K's scales x -zero level.
      __m512i offsets;
      if constexpr (kMin) {  // Q2_K: scale | min << 4
        offsets = int16_pairs(_mm512_srli_epi32(sc, 4), _mm512_srli_epi32(sc_hi, 4));
        sc = _mm512_and_si512(sc, _mm512_set1_epi32(0xF));
        sc_hi = _mm512_and_si512(sc_hi, _mm512_set1_epi32(0xF));
      } else {
        static_assert(kZero != 0);
        offsets = kq_times_minus_zero<W>(int16_pairs(sc, sc_hi));
      }
      for (int i = 0; i < nt; i++) {
        const uint8_t* a = x.block(tile0 + i, b0 + j);
        amx_block_dot<Tiles, kTc, kTa, kTb>(a, 0, &c[0][0]);
        amx_block_dot<Tiles, kTcHi, kTaHi, kTbHi>(a, 16, &c_hi[0][0]);
        for (int t = 0; t < T; t++) {
          __m512i s = _mm512_add_epi32(_mm512_load_si512(isum[i][t]),
                                       _mm512_add_epi32(_mm512_mullo_epi32(_mm512_load_si512(c[t]), sc),
                                                        _mm512_mullo_epi32(_mm512_load_si512(c_hi[t]), sc_hi)));
          const __m512i halves = broadcast_i32(a + PA::kHalfSumsOffset + 4 * t);
          if constexpr (kMin) _mm512_store_si512(msum[i][t], _mm512_dpwssd_epi32(_mm512_load_si512(msum[i][t]), offsets, halves));
          else s = _mm512_dpwssd_epi32(s, offsets, halves);
          _mm512_store_si512(isum[i][t], s);
        }
      }
    }
    if constexpr (kPerBlock) {
      // The minimums times the blocks' sums, a block pair per vpdpwssd (as the VNNI kernel).
      __m512i mins[4];
      for (int p = 0; p < 4; p++)
        mins[p] = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit + kMins + 32 * p)));
      for (int i = 0; i < nt; i++)
        for (int t = 0; t < T; t++) {
          __m512i m = _mm512_load_si512(msum[i][t]);
          for (int p = 0; p < 4; p++)
            m = _mm512_dpwssd_epi32(m, mins[p], broadcast_i32(x.block(tile0 + i, b0 + 2 * p) + PA::kPairSumsOffset + 4 * t));
          _mm512_store_si512(msum[i][t], m);
        }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit)));
    __m512 dmin = _mm512_setzero_ps();
    if constexpr (kMin) dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit + PW::kMinsOffset)));
    for (int i = 0; i < nt; i++) {
      const uint8_t* a0 = x.block(tile0 + i, b0);
      for (int t = 0; t < T; t++) {
        const __m512 dx = broadcast_f32(a0 + PA::kScaleOffset + 4 * t);
        __m512 r = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(isum[i][t])), _mm512_mul_ps(d, dx),
                                   _mm512_load_ps(acc[i][t]));
        if constexpr (kMin)
          r = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(msum[i][t])), _mm512_mul_ps(dmin, dx), r);
        _mm512_store_ps(acc[i][t], r);
      }
    }
  }
  amx_store(pw, g, x, tile0, nt, acc, y, ldy);
}

template <class Tiles, PackedKind W>
void amx_gemm(const PackedWeight& pw, int64_t g0, int64_t g1, const PackedActivations& x, float* y, int64_t ldy,
              int64_t token_chunk) {
  const int64_t tiles_per_chunk =
      std::clamp<int64_t>((token_chunk + PA::kTokensPerTile - 1) / PA::kTokensPerTile, 1, kAmxMaxTiles);
  Tiles::configure(amx_config<W>());  // per call: the tile state is the calling thread's
  for (int64_t tc = 0; tc < x.n_tiles(); tc += tiles_per_chunk) {
    const int nt = static_cast<int>(std::min(x.n_tiles(), tc + tiles_per_chunk) - tc);
    for (int64_t g = g0; g < g1; g++) {
      if constexpr (kIntegerScaled<W>) amx_kquant_group<Tiles, W>(pw, g, x, tc, nt, y, ldy);
      else amx_block_group<Tiles, W>(pw, g, x, tc, nt, y, ldy);
    }
  }
  Tiles::release();
}

template <class Tiles>
void amx_packed_gemm_for(const PackedWeight& w, int64_t g0, int64_t g1, const PackedActivations& x, float* y,
                         int64_t ldy, int64_t token_chunk) {
  with_packed_kind(w.kind, [&](auto kind) { amx_gemm<Tiles, decltype(kind)::value>(w, g0, g1, x, y, ldy, token_chunk); });
}

// NOLINTEND(misc-definitions-in-headers)

#pragma once
// Quantized weights repacked at load time for the AVX-512 VNNI kernels.
//
// Rows are interleaved in groups of 16, one row per int32 lane of a 512-bit
// register: a vector holds 4 consecutive quants of each of the 16 rows, so one
// vpdpbusd against 4 broadcast activation bytes advances 16 row dots at once,
// and 8 of them finish a whole 32-element block per lane. Each lane then holds
// a complete block dot and is scaled by its own row's scale: one scale
// multiply and one FMA per 16 rows per block, instead of ggml's per-lane
// float work that caps its int8 throughput.
//
// The formats keep their own bytes: groups one after another, each a run of
// units; for the 32-element formats a unit is a block pair, the headers of
// its two blocks followed by their quants. A header holds the block's fields for
// the 16 rows, field by field:
//   Q8_0, Q4_0, IQ4_NL: d fp16[16]                (32 bytes)
//   Q4_1:               d fp16[16] | m fp16[16]   (64)
//   Q5_0:               d fp16[16] | qh u32[16]   (96)
//   Q5_1:               d | m | qh                (128)
//   MXFP4:              e (e8m0) u8[16]           (16)
// The 256-wide IQ4_XS and k-quants run in units of their super-block
// instead of pairs: one header per unit, then its eight blocks' quants.
//   IQ4_XS: d fp16[16] | scales_h u16[16] | scales_l u32[16] (128 bytes, the
//           file's fields); block j's scale is d * (ls_j - 32), exact in float.
//   Q2_K:   d fp16[16] | dmin fp16[16] | scales u8[16 sub-blocks][16 rows]
//           (the file's bytes, transposed: 320).
//   Q3_K:   d fp16[16] | sc - 32 int8[16 sub-blocks][16 rows] | high bits
//           u32[8 blocks][16 rows] (800: the 6-bit scales unpacked to bytes,
//           4 bytes a row more than the file's 110 per super-block).
//   Q4_K:   d fp16[16] | dmin fp16[16] | sc u8[8][16] | m u8[4 block pairs]
//           [16 rows][2] (320: the 6-bit scales and minimums as bytes, 4 bytes
//           a row more than the file's 144; a pair's two minimums side by side
//           widen to one int16 pair per lane for vpdpwssd), its levels packed
//           as Q4_0's.
//   Q5_K:   Q4_K's header | fifth bits u32[8 blocks][16 rows] (832, as Q5_0's
//           reordered qh; 4 bytes a row more than the file's 176).
//   Q6_K:   d fp16[16] | sc int8[16 sub-blocks][16 rows] | high bits
//           u32[8 blocks][2 halves][16 rows] (1312: exactly the file's 210
//           bytes a row per super-block with the quants); the low 4 bits
//           packed as Q4_0's, bits 4-5 of element 16hf + 4k + e at bits
//           8e + 2k of half hf's word, so (word << (4 - 2k)) & 0x30 is
//           vector k's (one shift).
// and the quants:
//   Q8_0: quants[k=0..7][row 0..15][4]: qs[4k..4k+3] XOR 0x80 (unsigned q + 128)
//   the 4-bit kinds: quants[k=0..3][row 0..15][4]: qs[4k..4k+3] as stored; the
//         low nibbles are elements 4k..4k+3, the high nibbles 16+4k..16+4k+3
// Q5's fifth bits are reordered so that vector k's are one shift away: bit
// 8i + k of the packed qh is element 4k + i's, bit 8i + 4 + k element
// 16 + 4k + i's. IQ4_NL's and MXFP4's nibbles index their table (shifted by
// 128 to unsigned) in the kernel.
// So a matrix is one linear stream (the hardware prefetcher follows one
// stream better than a quant stream and a scale stream). Padding rows of the
// last group (and an odd last block's partner) are zero. The byte count
// equals the GGUF tensor's plus that padding, so decode streams no more than
// llama.cpp does.
// Arithmetic per (row, token): acc = fma(float(idot - bias), d_w * d_x, acc)
// block after block, where bias = z * sum of the block's activations undoes
// the unsigned offset z (128, 8, 16; 0 for Q4_1/Q5_1, whose minimum adds
// acc = fma(m_w, s_x, acc) with Q8_1's stored s_x). This is the order of
// ggml's scalar reference (up to FMA rounding), not of its SIMD paths: logits
// are not bit-identical to llama.cpp's (the unpacked kernels are; see Matmul
// and --no-repack).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "formats/block_formats.h"
#include "core/huge_page_arena.h"
#include "core/huge_page_buffer.h"
#include "core/thread_pool.h"
#include "formats/weight.h"
#include "hw/cpu_features.h"

namespace kestrel {

// One per weight format: the layout and the kernel follow from the kind.
enum class PackedKind { Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, IQ4_XS, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K };

// f(std::integral_constant<PackedKind, K>{}) for the kind k: the one switch from a kind known at run time to
// the kernels each ISA file instantiates per kind (the lambdas of those files keep the instantiations their own).
template <class F>
void with_packed_kind(PackedKind k, F&& f) {
  using K = PackedKind;
  switch (k) {
    case K::Q8_0: return f(std::integral_constant<K, K::Q8_0>{});
    case K::Q4_0: return f(std::integral_constant<K, K::Q4_0>{});
    case K::Q4_1: return f(std::integral_constant<K, K::Q4_1>{});
    case K::Q5_0: return f(std::integral_constant<K, K::Q5_0>{});
    case K::Q5_1: return f(std::integral_constant<K, K::Q5_1>{});
    case K::IQ4_NL: return f(std::integral_constant<K, K::IQ4_NL>{});
    case K::MXFP4: return f(std::integral_constant<K, K::MXFP4>{});
    case K::IQ4_XS: return f(std::integral_constant<K, K::IQ4_XS>{});
    case K::Q2_K: return f(std::integral_constant<K, K::Q2_K>{});
    case K::Q3_K: return f(std::integral_constant<K, K::Q3_K>{});
    case K::Q4_K: return f(std::integral_constant<K, K::Q4_K>{});
    case K::Q5_K: return f(std::integral_constant<K, K::Q5_K>{});
    case K::Q6_K: return f(std::integral_constant<K, K::Q6_K>{});
  }
}

struct PackedWeight {
  static constexpr int kRowsPerGroup = 16;
  static constexpr size_t kScaleBytes = kRowsPerGroup * sizeof(uint16_t);  // one fp16 field of a header
  GgmlType type = GgmlType::Q8_0;                                          // the source format
  PackedKind kind = PackedKind::Q8_0;
  int64_t rows = 0, n_blocks = 0, n_groups = 0;
  const uint8_t* data = nullptr;  // [n_groups][units][unit headers | blocks_per_unit() x quants]
  std::shared_ptr<const HugePageBuffer> memory;  // what `data` points into

  // The layout as functions of the kind (compile-time constants for the kernels).
  static constexpr size_t quant_bytes_of(PackedKind kind) {
    if (kind == PackedKind::Q2_K || kind == PackedKind::Q3_K) return 128;
    return kind == PackedKind::Q8_0 ? 512 : 256;
  }
  static constexpr int blocks_per_unit_of(PackedKind kind) {
    return kind == PackedKind::IQ4_XS || integer_scaled_of(kind) ? 8 : 2;
  }
  size_t quant_bytes_per_block() const { return quant_bytes_of(kind); }
  size_t header_bytes() const { return header_bytes_of(kind); }
  // A kind's per-block fields for the 16 rows (the 256-wide kinds: per unit; see the top of this file).
  static constexpr size_t header_bytes_of(PackedKind kind) {
    switch (kind) {
      case PackedKind::MXFP4: return kRowsPerGroup;
      case PackedKind::IQ4_XS: return 128;
      case PackedKind::Q2_K: return 2 * kScaleBytes + 16 * kRowsPerGroup;
      case PackedKind::Q3_K: return kScaleBytes + 16 * kRowsPerGroup + 8 * 4 * kRowsPerGroup;
      case PackedKind::Q4_K: return 2 * kScaleBytes + 2 * 8 * kRowsPerGroup;
      case PackedKind::Q5_K: return 2 * kScaleBytes + 2 * 8 * kRowsPerGroup + 8 * 4 * kRowsPerGroup;
      case PackedKind::Q6_K: return kScaleBytes + 16 * kRowsPerGroup + 8 * 2 * 4 * kRowsPerGroup;
      case PackedKind::Q4_1: return 2 * kScaleBytes;
      case PackedKind::Q5_0: return kScaleBytes + 4 * kRowsPerGroup;
      case PackedKind::Q5_1: return 2 * kScaleBytes + 4 * kRowsPerGroup;
      default: return kScaleBytes;
    }
  }
  // What a kind's kernel does beyond Q4_0's, and where its header fields sit (offsets from the header).
  static constexpr bool has_min_of(PackedKind kind) { return kind == PackedKind::Q4_1 || kind == PackedKind::Q5_1; }
  static constexpr bool has_qh_of(PackedKind kind) { return kind == PackedKind::Q5_0 || kind == PackedKind::Q5_1; }
  // The kinds whose sub-block dots are scaled in integers, one FMA per super-block.
  static constexpr bool integer_scaled_of(PackedKind kind) {
    return kind == PackedKind::Q2_K || kind == PackedKind::Q3_K || kind == PackedKind::Q4_K ||
           kind == PackedKind::Q5_K || kind == PackedKind::Q6_K;
  }
  // The k-quants whose minimums (dmin, per-sub-block m) subtract: Q2_K, Q4_K, Q5_K.
  static constexpr bool has_kmin_of(PackedKind kind) {
    return kind == PackedKind::Q2_K || kind == PackedKind::Q4_K || kind == PackedKind::Q5_K;
  }
  // The k-quants with one scale per 32-element block (the others have one per 16): Q4_K, Q5_K.
  static constexpr bool scale_per_block_of(PackedKind kind) {
    return kind == PackedKind::Q4_K || kind == PackedKind::Q5_K;
  }
  // The level a k-quant's unsigned levels stand for zero at (Q3_K's 4, Q6_K's 32; 0 where a minimum
  // subtracts instead).
  static constexpr int32_t zero_level_of(PackedKind kind) {
    return kind == PackedKind::Q3_K ? 4 : kind == PackedKind::Q6_K ? 32 : 0;
  }
  static constexpr size_t kMinsOffset = kScaleBytes;  // Q4_1/Q5_1's m, Q2_K/Q4_K's dmin: fp16[16] after d
  static constexpr size_t qh_offset_of(PackedKind kind) { return header_bytes_of(kind) - 4 * kRowsPerGroup; }
  static constexpr size_t kIq4xsScalesHOffset = kScaleBytes, kIq4xsScalesLOffset = 2 * kScaleBytes;
  static constexpr size_t sub_scales_offset_of(PackedKind kind) { return (has_kmin_of(kind) ? 2 : 1) * kScaleBytes; }
  // Q4_K's and Q5_K's m: u8[4 block pairs][16 rows][2 blocks].
  static constexpr size_t kQ4kMinsOffset = 2 * kScaleBytes + 8 * kRowsPerGroup;
  // Q3_K's, Q5_K's and Q6_K's high bits: u32[8 blocks][high_words_of][16 rows] after the scales.
  static constexpr size_t high_bits_offset_of(PackedKind kind) {
    return kind == PackedKind::Q5_K ? 2 * kScaleBytes + 2 * 8 * kRowsPerGroup : kScaleBytes + 16 * kRowsPerGroup;
  }
  static constexpr int high_words_of(PackedKind kind) { return kind == PackedKind::Q6_K ? 2 : 1; }
  // Compact kinds: a group is a run of units (block pairs; super-blocks) of headers, then quants.
  static constexpr size_t unit_header_bytes_of(PackedKind kind) {
    return blocks_per_unit_of(kind) == 8 ? header_bytes_of(kind) : 2 * header_bytes_of(kind);
  }
  static constexpr size_t unit_bytes_of(PackedKind kind) {
    return unit_header_bytes_of(kind) + blocks_per_unit_of(kind) * quant_bytes_of(kind);
  }
  bool has_min() const { return has_min_of(kind); }
  bool integer_scaled() const { return integer_scaled_of(kind); }
  bool super_block_units() const { return blocks_per_unit_of(kind) == 8; }
  int blocks_per_unit() const { return blocks_per_unit_of(kind); }
  size_t unit_header_bytes() const { return unit_header_bytes_of(kind); }
  size_t unit_bytes() const { return unit_bytes_of(kind); }
  size_t group_bytes() const {
    return static_cast<size_t>((n_blocks + blocks_per_unit() - 1) / blocks_per_unit()) * unit_bytes();
  }
  const uint8_t* unit(int64_t g, int64_t b) const {
    return data + g * group_bytes() + (b / blocks_per_unit()) * unit_bytes();
  }
  const uint8_t* block_quants(int64_t g, int64_t b) const {
    return unit(g, b) + unit_header_bytes() + (b % blocks_per_unit()) * quant_bytes_per_block();
  }
  // The header holding block b's fields (the 256-wide kinds: its super-block's).
  const uint8_t* block_header(int64_t g, int64_t b) const {
    return super_block_units() ? unit(g, b) : unit(g, b) + (b % 2) * header_bytes();
  }
  // The header's fields (all kinds but MXFP4, whose header is its e8m0 scales).
  const uint16_t* block_scales(int64_t g, int64_t b) const {
    return reinterpret_cast<const uint16_t*>(block_header(g, b));
  }
  const uint16_t* block_mins(int64_t g, int64_t b) const {
    return reinterpret_cast<const uint16_t*>(block_header(g, b) + kMinsOffset);
  }
  const uint32_t* block_qh(int64_t g, int64_t b) const {
    return reinterpret_cast<const uint32_t*>(block_header(g, b) + qh_offset_of(kind));
  }
  // Lane i's scale of block b (the reference's; the kernel computes the same floats).
  float block_scale(int64_t g, int64_t b, int i) const;
  // The per-sub-block bytes, [sub-block][16 rows] (Q2_K: scale | min << 4, 16 of them; Q3_K: sc - 32, 16;
  // Q4_K/Q5_K: sc, 8, then their minimums, 8; Q6_K: sc, 16), and block b's high bits
  // ([high_words_of][16 rows]).
  const uint8_t* kq_scales(int64_t g, int64_t b) const { return block_header(g, b) + sub_scales_offset_of(kind); }
  // Q4_K's/Q5_K's minimum of block b, lane i.
  const uint8_t& q4k_min(int64_t g, int64_t b, int i) const {
    return block_header(g, b)[kQ4kMinsOffset + (b % 8 / 2) * 2 * kRowsPerGroup + 2 * i + b % 2];
  }
  const uint32_t* high_bits(int64_t g, int64_t b) const {
    return reinterpret_cast<const uint32_t*>(block_header(g, b) + high_bits_offset_of(kind)) +
           (b % 8) * high_words_of(kind) * kRowsPerGroup;
  }
};

// Whether w is a matrix of a format with a packed kind: it serves batches
// and single tokens alike.
bool packable(const Weight& w);
bool has_packed_kind(GgmlType t);  // the type half of packable()
// The levels, scales and offsets of 32-element block b of a row of k-quant
// type t (levels[32]; scale/offset[0] for elements 0-15, [1] for 16-31):
// what the packer takes the k-quants' levels from.
void unpack_block32(GgmlType t, const uint8_t* row, int64_t b, uint8_t* levels, float* scale, float* offset);
// The repacked copy of w (throws Error if !packable(w)), groups split over
// the pool's threads when one is given, in memory from `arena` when one is
// given (else in a buffer of its own).
std::shared_ptr<const PackedWeight> pack_weight(const Weight& w, ThreadPool* pool = nullptr,
                                                HugePageArena* arena = nullptr);

// Activations for the packed kernels, repacked per call in tiles of 8
// tokens so that a micro-kernel reads everything through one pointer with
// constant offsets. Per (tile, block), kBytesPerBlock bytes:
//   qs[8 tokens][32] int8 | bias[8] int32 = -z * sum(qs) | d[8] float |
//   sum[8] float | half_sums[8] int16 pairs | pair_sums[8] int16 pairs
// (the bias undoes the kind's unsigned offset z: 128 for Q8_0 and the
// tables, 8 for Q4_0, 16 for Q5_0, else 0; `sum` is what Q4_1's and Q5_1's
// minimum multiplies, Q8_1's stored d * sum; half_sums, the integer sums of
// the block's first and last 16 values side by side, what Q2_K's minimums and
// Q3_K's and Q6_K's zero levels meet in vpdpwssd; pair_sums, in even blocks b
// only, the integer sums of blocks b and b + 1 side by side, what Q4_K's/Q5_K's
// minimum pairs meet in vpdpwssd). Tokens past n_tokens in the last tile are zero.
struct PackedActivations {
  static constexpr int kTokensPerTile = 8;
  static constexpr size_t kBytesPerBlock = 416;
  static constexpr size_t kBiasOffset = 256, kScaleOffset = 288, kSumOffset = 320, kHalfSumsOffset = 352,
                          kPairSumsOffset = 384;
  const uint8_t* data = nullptr;
  int64_t n_tokens = 0, n_blocks = 0;

  int64_t n_tiles() const { return (n_tokens + kTokensPerTile - 1) / kTokensPerTile; }
  const uint8_t* block(int64_t tile, int64_t b) const { return data + (tile * n_blocks + b) * kBytesPerBlock; }
};
size_t packed_activation_bytes(int64_t n_tokens, int64_t n_blocks);
// Writes token tiles [tile0, tile1) of x ([n_tokens][n_blocks] Q8_0 blocks)
// for weights of packed kind `kind` into out (packed_activation_bytes in all).
void pack_activations(PackedKind kind, const BlockQ8_0* x, int64_t n_tokens, int64_t n_blocks, int64_t tile0,
                      int64_t tile1, uint8_t* out);
// The same from ggml's Q8_1 blocks (what Q4_1/Q5_1 meet): the offset, their
// minimum, multiplies the block sum as Q8_1 stores it (fp16(d * sum)).
struct BlockQ8_1;
void pack_activations_q8_1(const BlockQ8_1* x, int64_t n_tokens, int64_t n_blocks, int64_t tile0, int64_t tile1,
                           uint8_t* out);

// The same tiles from activations quantized per 256 (Q8_K, what ggml pairs
// with the k-quants and IQ4_XS): each 32-element block carries its
// super-block's scale, so the packed kernels round activations as llama.cpp
// does for those types. n_blocks counts 32-element blocks.
struct BlockQ8_K;
void pack_activations_q8k(PackedKind kind, const BlockQ8_K* x, int64_t n_tokens, int64_t n_blocks, int64_t tile0,
                          int64_t tile1, uint8_t* out);

// y[t * ldy + r] for rows r in [16*g0, min(rows, 16*g1)) and all tokens.
// token_chunk: tokens per pass over the groups (see hw/tuning.h), 1 to 256,
// rounded up to whole token tiles.
void packed_gemm_reference(const PackedWeight& w, int64_t g0, int64_t g1, const PackedActivations& x, float* y,
                           int64_t ldy);
// The same results bit for bit with SIMD: AVX-512 VNNI's vpdpbusd where the
// CPU has it, else AVX-VNNI's 256-bit one, else AVX2's vpmaddubsw/vpmaddwd
// (kernels/x86/packed_q8_*.cpp);
// the best table compiled in that the CPU runs at this ISA level
// (isa_dispatch.h), else null.
struct PackedGemm {
  const char* isa;
  void (*gemm)(const PackedWeight& w, int64_t g0, int64_t g1, const PackedActivations& x, float* y, int64_t ldy,
               int64_t token_chunk);
  // What `kestrel hw` says runs, for the 32-element kinds and IQ4_XS, and for the k-quants.
  const char* blocks;
  const char* k_quants;
};
const PackedGemm* packed_gemm(IsaLevel isa = selected_isa());
// The tile kernels for batches (AMX: kernels/x86/packed_q8_amx.h) where the level is amx and the CPU's
// tiles are usable, else null: they read the same packed weights, and packed_gemm's table keeps the batches
// below the crossover (Tuning::tile_min_tokens) and single tokens.
const PackedGemm* packed_tile_gemm(IsaLevel isa = selected_isa());
// The AMX kernel body on the scalar model of the tile instructions (amx_tiles.h), where the CPU has
// AVX-512 VNNI (the body's unpacking and scaling): tests, never served.
const PackedGemm* packed_tile_model_gemm();
// Every SIMD table compiled in that this CPU runs, whatever the level picks
// (tests and benchmarks): AVX2's, AVX-VNNI's, the AVX-VNNI code in the EVEX
// encoding of AVX-512 VL + VNNI (so that a CPU with AVX-512 VNNI tests what
// an AVX-VNNI CPU runs), AVX-512 VNNI's, AMX's where the tiles are usable, and
// the AMX body on the tile model.
std::vector<const PackedGemm*> runnable_packed_gemms();

}  // namespace kestrel

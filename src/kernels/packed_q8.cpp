#include "kernels/packed_q8.h"

#include "kernels/isa_dispatch.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <type_traits>
#include <utility>

#include "core/error.h"
#include "formats/fp16.h"
#include "formats/kquant_formats.h"
#include "formats/nonlinear4_formats.h"
#include "formats/q4q5_formats.h"
#include "kernels/gemm_q8.h"
#include "kernels/kquant_dot.h"

namespace kestrel {

static std::optional<PackedKind> packed_kind_of(GgmlType t);

static bool is_matrix_of_blocks(const Weight& w) {
  return w.ne.size() == 2 && w.cols() % traits(w.type).block_size == 0 && w.cols() % kQK8_0 == 0 && w.rows() > 0 &&
         w.data != nullptr;
}

bool has_packed_kind(GgmlType t) { return packed_kind_of(t).has_value(); }

bool packable(const Weight& w) { return has_packed_kind(w.type) && is_matrix_of_blocks(w); }

void unpack_block32(GgmlType t, const uint8_t* row, int64_t b, uint8_t* L, float* scale, float* offset) {
  const int64_t sb = b / 8;  // the 256-wide super-block, for the k-quants and IQ4_XS
  const int j = static_cast<int>(b % 8);
  auto both = [&](float s, float m) { scale[0] = scale[1] = s, offset[0] = offset[1] = m; };
  switch (t) {
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: {
      // Sub-block j: the low (j even) or high nibbles of qs[32 (j / 2) ..], Q5_K's fifth bit j of qh.
      auto k4 = [&](const auto& x) {
        int sc, mn;
        unpack_scale_min_k4(x.scales, j, sc, mn);
        for (int l = 0; l < 32; l++) {
          const uint8_t q = x.qs[32 * (j / 2) + l];
          L[l] = static_cast<uint8_t>(j % 2 ? q >> 4 : q & 0xF);
          if constexpr (requires { x.qh; }) L[l] |= static_cast<uint8_t>(((x.qh[l] >> j) & 1) << 4);
        }
        both(fp16_to_fp32(x.d) * static_cast<float>(sc), -(fp16_to_fp32(x.dmin) * static_cast<float>(mn)));
      };
      if (t == GgmlType::Q5_K) k4(reinterpret_cast<const BlockQ5_K*>(row)[sb]);
      else k4(reinterpret_cast<const BlockQ4_K*>(row)[sb]);
      return;
    }
    case GgmlType::Q6_K: {
      const BlockQ6_K& x = reinterpret_cast<const BlockQ6_K*>(row)[sb];
      const int h = j / 4, q = j % 4;
      for (int l = 0; l < 32; l++) {
        const int lo = (x.ql[64 * h + l + 32 * (q & 1)] >> (q >= 2 ? 4 : 0)) & 0xF;
        L[l] = static_cast<uint8_t>(lo | (((x.qh[32 * h + l] >> (2 * q)) & 3) << 4));
      }
      for (int half = 0; half < 2; half++) {
        scale[half] = fp16_to_fp32(x.d) * static_cast<float>(x.scales[8 * h + 2 * q + half]);
        offset[half] = -32 * scale[half];
      }
      return;
    }
    case GgmlType::Q3_K:
    case GgmlType::Q2_K: {
      const bool three = t == GgmlType::Q3_K;
      const int h = j / 4, jj = j % 4;
      if (three) {
        const BlockQ3_K& x = reinterpret_cast<const BlockQ3_K*>(row)[sb];
        int8_t sc[16];
        unpack_scales_q3_K(x.scales, sc);
        for (int l = 0; l < 32; l++)
          L[l] = static_cast<uint8_t>(((x.qs[32 * h + l] >> (2 * jj)) & 3) | (((x.hmask[l] >> j) & 1) << 2));
        for (int half = 0; half < 2; half++) {
          scale[half] = fp16_to_fp32(x.d) * static_cast<float>(sc[8 * h + 2 * jj + half] - 32);
          offset[half] = -4 * scale[half];
        }
      } else {
        const BlockQ2_K& x = reinterpret_cast<const BlockQ2_K*>(row)[sb];
        for (int l = 0; l < 32; l++) L[l] = static_cast<uint8_t>((x.qs[32 * h + l] >> (2 * jj)) & 3);
        for (int half = 0; half < 2; half++) {
          const uint8_t sc = x.scales[8 * h + 2 * jj + half];
          scale[half] = fp16_to_fp32(x.d) * static_cast<float>(sc & 0xF);
          offset[half] = -(fp16_to_fp32(x.dmin) * static_cast<float>(sc >> 4));
        }
      }
      return;
    }
    default: throw Error(fmt::format("type {} has no repacked form", type_name(t)));
  }
}

// Q5's fifth bits (bit e: element e's), reordered (see packed_q8.h): vector
// k's are one shift away from bit 4 of each byte.
static uint32_t reorder_fifth_bits(uint32_t qh) {
  uint32_t out = 0;
  for (int k = 0; k < 4; k++)
    for (int e = 0; e < 4; e++) {
      out |= ((qh >> (4 * k + e)) & 1u) << (8 * e + k);
      out |= ((qh >> (16 + 4 * k + e)) & 1u) << (8 * e + 4 + k);
    }
  return out;
}

namespace {

// Where block b of a row goes: lane i of packed group g, and the pieces of that group's block every kind writes.
struct PackTarget {
  const PackedWeight& p;
  const uint8_t* row;
  int64_t g, b;
  int i;
  uint8_t* dst;  // the block's quants, lane i's first 4 bytes
  uint8_t* hdr;  // the block's header
  uint16_t* scales;
  uint16_t* mins;

  PackTarget(const PackedWeight& pw, const uint8_t* r, int64_t group, int64_t block, int lane)
      : p(pw), row(r), g(group), b(block), i(lane),
        dst(const_cast<uint8_t*>(pw.block_quants(group, block)) + lane * 4),
        hdr(const_cast<uint8_t*>(pw.block_header(group, block))),
        scales(reinterpret_cast<uint16_t*>(hdr)),
        mins(reinterpret_cast<uint16_t*>(hdr + PackedWeight::kMinsOffset)) {}
  template <class Block>
  const Block& block(int64_t index) const {
    return reinterpret_cast<const Block*>(row)[index];
  }
  // 4-bit quants as they are stored (two elements a byte), 4 bytes per vector.
  void nibbles(const uint8_t* qs) const {
    for (int k = 0; k < 4; k++) std::memcpy(dst + k * 64, qs + 4 * k, 4);
  }
  // Q5's fifth bits, reordered.
  void fifth_bits(const uint8_t* qh4) const {
    uint32_t qh;
    std::memcpy(&qh, qh4, 4);
    const_cast<uint32_t*>(p.block_qh(g, b))[i] = reorder_fifth_bits(qh);
  }
  // The k-quants' levels of this 32-element sub-block, from the format's own unpacking (checked against its
  // dequantizer).
  void levels(uint8_t* L) const {
    float unused_scale[2], unused_offset[2];
    unpack_block32(p.type, row, b, L, unused_scale, unused_offset);
  }
  // Levels' low 4 bits packed as Q4_0's nibbles.
  void level_nibbles(const uint8_t* L) const {
    for (int k = 0; k < 4; k++)
      for (int e = 0; e < 4; e++)
        dst[k * 64 + e] = static_cast<uint8_t>((L[4 * k + e] & 0xF) | ((L[16 + 4 * k + e] & 0xF) << 4));
  }
  uint8_t* kq_scales() const { return const_cast<uint8_t*>(p.kq_scales(g, b)); }
  uint32_t* high_bits() const { return const_cast<uint32_t*>(p.high_bits(g, b)); }
};

void pack_q8_0(const PackTarget& t) {
  const auto& x = t.block<BlockQ8_0>(t.b);
  t.scales[t.i] = x.d;
  for (int k = 0; k < 8; k++)
    for (int j = 0; j < 4; j++) t.dst[k * 64 + j] = static_cast<uint8_t>(x.qs[4 * k + j]) ^ 0x80;
}

// Q4_0 and IQ4_NL: a scale and nibbles.
template <class Block>
void pack_scale_nibbles(const PackTarget& t) {
  const auto& x = t.block<Block>(t.b);
  t.scales[t.i] = x.d;
  t.nibbles(x.qs);
}

void pack_q4_1(const PackTarget& t) {
  const auto& x = t.block<BlockQ4_1>(t.b);
  t.scales[t.i] = x.d, t.mins[t.i] = x.m;
  t.nibbles(x.qs);
}

void pack_q5_0(const PackTarget& t) {
  const auto& x = t.block<BlockQ5_0>(t.b);
  t.scales[t.i] = x.d;
  t.fifth_bits(x.qh);
  t.nibbles(x.qs);
}

void pack_q5_1(const PackTarget& t) {
  const auto& x = t.block<BlockQ5_1>(t.b);
  t.scales[t.i] = x.d, t.mins[t.i] = x.m;
  t.fifth_bits(x.qh);
  t.nibbles(x.qs);
}

void pack_mxfp4(const PackTarget& t) {
  const auto& x = t.block<BlockMXFP4>(t.b);
  t.hdr[t.i] = x.e;
  t.nibbles(x.qs);
}

void pack_iq4_xs(const PackTarget& t) {
  const auto& x = t.block<BlockIQ4_XS>(t.b / 8);
  if (t.b % 8 == 0) {  // the super-block's fields, once
    t.scales[t.i] = x.d;
    std::memcpy(t.hdr + PackedWeight::kIq4xsScalesHOffset + 2 * t.i, &x.scales_h, 2);
    std::memcpy(t.hdr + PackedWeight::kIq4xsScalesLOffset + 4 * t.i, x.scales_l, 4);
  }
  t.nibbles(x.qs + 16 * (t.b % 8));
}

// Q4_K and Q5_K: the super-block's scale, min and 6-bit sub-block scales and mins; the levels' low nibbles; Q5_K's
// fifth bits reordered as Q5_0's.
template <class Block>
void pack_q4_q5_k(const PackTarget& t) {
  constexpr int G = PackedWeight::kRowsPerGroup;
  if (t.b % 8 == 0) {  // the super-block's fields, once
    const auto& x = t.block<Block>(t.b / 8);
    t.scales[t.i] = x.d, t.mins[t.i] = x.dmin;
    uint8_t* sc = t.kq_scales();
    for (int j = 0; j < 8; j++) {
      int s, m;
      unpack_scale_min_k4(x.scales, j, s, m);
      sc[j * G + t.i] = static_cast<uint8_t>(s);
      const_cast<uint8_t&>(t.p.q4k_min(t.g, t.b + j, t.i)) = static_cast<uint8_t>(m);
    }
  }
  uint8_t L[32];
  t.levels(L);
  t.level_nibbles(L);
  if constexpr (std::is_same_v<Block, BlockQ5_K>) {
    uint32_t qh = 0;
    for (int e = 0; e < 32; e++) qh |= static_cast<uint32_t>(L[e] >> 4) << e;
    t.high_bits()[t.i] = reorder_fifth_bits(qh);
  }
}

void pack_q6_k(const PackTarget& t) {
  constexpr int G = PackedWeight::kRowsPerGroup;
  if (t.b % 8 == 0) {  // the super-block's fields, once
    const auto& x = t.block<BlockQ6_K>(t.b / 8);
    t.scales[t.i] = x.d;
    uint8_t* sub = t.kq_scales();
    for (int k = 0; k < 16; k++) sub[k * G + t.i] = static_cast<uint8_t>(x.scales[k]);
  }
  uint8_t L[32];
  t.levels(L);
  t.level_nibbles(L);
  // Bits 4-5 of element 16hf + 4k + e at bits 8e + 2k of half hf's word.
  uint32_t* high = t.high_bits();
  for (int hf = 0; hf < 2; hf++) {
    uint32_t word = 0;
    for (int k = 0; k < 4; k++)
      for (int e = 0; e < 4; e++) word |= static_cast<uint32_t>(L[16 * hf + 4 * k + e] >> 4) << (8 * e + 2 * k);
    high[hf * G + t.i] = word;
  }
}

// Q2_K and Q3_K: 2-bit planes per sub-block, Q3_K's third bits beside.
template <bool kThree>
void pack_q2_q3_k(const PackTarget& t) {
  constexpr int G = PackedWeight::kRowsPerGroup;
  if (t.b % 8 == 0) {  // the super-block's fields, once
    uint8_t* sub = t.kq_scales();
    if constexpr (kThree) {
      const auto& x = t.block<BlockQ3_K>(t.b / 8);
      int8_t sc[16];
      unpack_scales_q3_K(x.scales, sc);
      t.scales[t.i] = x.d;
      for (int k = 0; k < 16; k++) sub[k * G + t.i] = static_cast<uint8_t>(sc[k] - 32);
    } else {
      const auto& x = t.block<BlockQ2_K>(t.b / 8);
      t.scales[t.i] = x.d, t.mins[t.i] = x.dmin;
      for (int k = 0; k < 16; k++) sub[k * G + t.i] = x.scales[k];
    }
  }
  uint8_t L[32];
  t.levels(L);
  uint32_t high = 0;
  for (int hf = 0; hf < 2; hf++)
    for (int e = 0; e < 4; e++) {
      uint8_t byte = 0;
      for (int sh = 0; sh < 4; sh++) {
        const uint8_t level = L[16 * hf + 4 * sh + e];
        byte |= static_cast<uint8_t>((level & 3) << (2 * sh));
        high |= static_cast<uint32_t>(level >> 2) << (8 * e + 4 * hf + sh);
      }
      t.dst[hf * 64 + e] = byte;
    }
  if constexpr (kThree) t.high_bits()[t.i] = high;
}

// One row per weight format the packed kernels read: its packed kind and how one of its blocks is packed. A
// format without a row is not repacked (its plain row kernels run it).
struct PackedRow {
  GgmlType type;
  PackedKind kind;
  void (*pack)(const PackTarget& t);
};
constexpr PackedRow kPackedRows[] = {
    {GgmlType::Q8_0, PackedKind::Q8_0, pack_q8_0},
    {GgmlType::Q4_0, PackedKind::Q4_0, pack_scale_nibbles<BlockQ4_0>},
    {GgmlType::Q4_1, PackedKind::Q4_1, pack_q4_1},
    {GgmlType::Q5_0, PackedKind::Q5_0, pack_q5_0},
    {GgmlType::Q5_1, PackedKind::Q5_1, pack_q5_1},
    {GgmlType::IQ4_NL, PackedKind::IQ4_NL, pack_scale_nibbles<BlockIQ4_NL>},
    {GgmlType::MXFP4, PackedKind::MXFP4, pack_mxfp4},
    {GgmlType::IQ4_XS, PackedKind::IQ4_XS, pack_iq4_xs},
    {GgmlType::Q2_K, PackedKind::Q2_K, pack_q2_q3_k<false>},
    {GgmlType::Q3_K, PackedKind::Q3_K, pack_q2_q3_k<true>},
    {GgmlType::Q4_K, PackedKind::Q4_K, pack_q4_q5_k<BlockQ4_K>},
    {GgmlType::Q5_K, PackedKind::Q5_K, pack_q4_q5_k<BlockQ5_K>},
    {GgmlType::Q6_K, PackedKind::Q6_K, pack_q6_k},
};

const PackedRow* packed_row(GgmlType t) {
  for (const PackedRow& r : kPackedRows)
    if (r.type == t) return &r;
  return nullptr;
}

}  // namespace

// The packed kind of a weight format, if it has one.
static std::optional<PackedKind> packed_kind_of(GgmlType t) {
  if (const PackedRow* r = packed_row(t)) return r->kind;
  return std::nullopt;
}

std::shared_ptr<const PackedWeight> pack_weight(const Weight& w, ThreadPool* pool, HugePageArena* arena) {
  if (!packable(w))
    throw Error(fmt::format("tensor '{}' ({}) cannot be repacked", w.name, type_name(w.type)));
  constexpr int G = PackedWeight::kRowsPerGroup;
  auto p = std::make_shared<PackedWeight>();
  p->type = w.type;
  p->kind = *packed_kind_of(w.type);
  p->rows = w.rows();
  p->n_blocks = w.cols() / kQK8_0;
  p->n_groups = (p->rows + G - 1) / G;
  const int64_t nb = p->n_blocks;
  const size_t bytes = p->n_groups * p->group_bytes();
  if (arena) {
    auto a = arena->allocate(bytes, "repacking " + w.name);
    p->data = a.data;
    p->memory = std::move(a.owner);
  } else {
    auto own = std::make_shared<HugePageBuffer>(bytes, "repacking " + w.name);
    p->data = static_cast<const uint8_t*>(own->data());
    p->memory = std::move(own);
  }
  const auto pack = packed_row(w.type)->pack;
  auto pack_groups = [&](int64_t g0, int64_t g1) {
    // Padding rows and an odd last block's partner stay zero.
    std::memset(const_cast<uint8_t*>(p->data) + g0 * p->group_bytes(), 0, static_cast<size_t>(g1 - g0) * p->group_bytes());
    for (int64_t g = g0; g < g1; g++)
      for (int i = 0; i < G && g * G + i < p->rows; i++)
        for (int64_t b = 0; b < nb; b++) pack(PackTarget(*p, w.row(g * G + i), g, b, i));
  };
  if (pool)
    pool->parallel_for(p->n_groups, pack_groups);
  else
    pack_groups(0, p->n_groups);
  return p;
}

size_t packed_activation_bytes(int64_t n_tokens, int64_t n_blocks) {
  const int64_t tiles = (n_tokens + PackedActivations::kTokensPerTile - 1) / PackedActivations::kTokensPerTile;
  return static_cast<size_t>(tiles * n_blocks) * PackedActivations::kBytesPerBlock;
}

namespace {

// One token's entry in a tile block: its 32 quants, the scale, and the sums
// the kernels need (`sum`: what the whole block's offset multiplies, d * sum
// unless the activation format stores its own, as Q8_1 does).
struct TokenBlock {
  const int8_t* qs;
  float d;
  int32_t bias = 0;
  std::optional<float> stored_sum;  // Q8_1's s, what Q4_1's/Q5_1's minimum multiplies
};

void write_token(uint8_t* dst, int t, const TokenBlock& tb) {
  using PA = PackedActivations;
  int32_t lo = 0, hi = 0;
  for (int j = 0; j < kQK8_0 / 2; j++) lo += tb.qs[j], hi += tb.qs[j + 16];
  const float sum = tb.stored_sum.value_or(tb.d * static_cast<float>(lo + hi));
  std::memcpy(dst + t * kQK8_0, tb.qs, kQK8_0);
  std::memcpy(dst + PA::kBiasOffset + 4 * t, &tb.bias, 4);
  std::memcpy(dst + PA::kScaleOffset + 4 * t, &tb.d, 4);
  std::memcpy(dst + PA::kSumOffset + 4 * t, &sum, 4);
  // |half sum| <= 16 * 128 fits int16.
  const uint32_t halves = static_cast<uint16_t>(static_cast<int16_t>(lo)) | static_cast<uint32_t>(hi) << 16;
  std::memcpy(dst + PA::kHalfSumsOffset + 4 * t, &halves, 4);
}

// The even block's pair_sums from its and the next block's (none: zero) integer sums; |sum| <= 32 * 128
// fits int16.
void write_pair_sums(uint8_t* even, const uint8_t* odd) {
  using PA = PackedActivations;
  auto block_sum = [](const uint8_t* blk, int t) {
    uint32_t halves;
    std::memcpy(&halves, blk + PA::kHalfSumsOffset + 4 * t, 4);
    const int32_t lo = static_cast<int16_t>(halves & 0xFFFF), hi = static_cast<int16_t>(halves >> 16);
    return static_cast<uint16_t>(static_cast<int16_t>(lo + hi));
  };
  for (int t = 0; t < PA::kTokensPerTile; t++) {
    const uint32_t pair = block_sum(even, t) | (odd ? static_cast<uint32_t>(block_sum(odd, t)) << 16 : 0u);
    std::memcpy(even + PA::kPairSumsOffset + 4 * t, &pair, 4);
  }
}

// Token tiles [tile0, tile1): block(token, b) gives each token's TokenBlock; tokens past the end stay zero.
template <typename BlockOf>
void pack_tiles(int64_t n_tokens, int64_t n_blocks, int64_t tile0, int64_t tile1, uint8_t* out, BlockOf block) {
  using PA = PackedActivations;
  for (int64_t tile = tile0; tile < tile1; tile++)
    for (int64_t b = 0; b < n_blocks; b++) {
      uint8_t* dst = out + (tile * n_blocks + b) * PA::kBytesPerBlock;
      std::memset(dst, 0, PA::kBytesPerBlock);
      for (int t = 0; t < PA::kTokensPerTile; t++) {
        const int64_t token = tile * PA::kTokensPerTile + t;
        if (token >= n_tokens) break;
        write_token(dst, t, block(token, b));
      }
      if (b % 2 == 1) write_pair_sums(dst - PA::kBytesPerBlock, dst);
      else if (b == n_blocks - 1) write_pair_sums(dst, nullptr);
    }
}

}  // namespace

// What a kind adds to its signed values to store them unsigned (Q4_1/Q5_1's
// and the k-quants' levels are unsigned already: their minimums and offsets
// are separate terms).
static int32_t unsigned_offset(PackedKind kind) {
  switch (kind) {
    case PackedKind::Q8_0: case PackedKind::IQ4_NL: case PackedKind::MXFP4: case PackedKind::IQ4_XS: return 128;
    case PackedKind::Q4_0: return 8;
    case PackedKind::Q5_0: return 16;
    default: return 0;
  }
}

void pack_activations(PackedKind kind, const BlockQ8_0* x, int64_t n_tokens, int64_t n_blocks, int64_t tile0,
                      int64_t tile1, uint8_t* out) {
  // The levels are unsigned (q + offset): the bias undoes it.
  const int32_t offset = unsigned_offset(kind);
  pack_tiles(n_tokens, n_blocks, tile0, tile1, out, [&](int64_t token, int64_t b) {
    const BlockQ8_0& blk = x[token * n_blocks + b];
    int32_t sum = 0;
    for (int j = 0; j < kQK8_0; j++) sum += blk.qs[j];
    return TokenBlock{blk.qs, fp16_to_fp32(blk.d), -offset * sum, std::nullopt};
  });
}

void pack_activations_q8k(PackedKind kind, const BlockQ8_K* x, int64_t n_tokens, int64_t n_blocks, int64_t tile0,
                          int64_t tile1, uint8_t* out) {
  const int64_t n_super = n_blocks / 8;
  const int32_t offset = unsigned_offset(kind);
  pack_tiles(n_tokens, n_blocks, tile0, tile1, out, [&](int64_t token, int64_t b) {
    const BlockQ8_K& sb = x[token * n_super + b / 8];
    const int8_t* qs = sb.qs + 32 * (b % 8);
    int32_t sum = 0;
    for (int j = 0; j < kQK8_0; j++) sum += qs[j];
    return TokenBlock{qs, sb.d, -offset * sum, std::nullopt};
  });
}

void pack_activations_q8_1(const BlockQ8_1* x, int64_t n_tokens, int64_t n_blocks, int64_t tile0, int64_t tile1,
                           uint8_t* out) {
  pack_tiles(n_tokens, n_blocks, tile0, tile1, out, [&](int64_t token, int64_t b) {
    const BlockQ8_1& blk = x[token * n_blocks + b];
    return TokenBlock{blk.qs, fp16_to_fp32(blk.d), 0, fp16_to_fp32(blk.s)};
  });
}

// The unsigned level of element e (0..31) of lane `row` in block b of group g.
static int packed_level(const PackedWeight& w, int64_t g, int64_t b, int row, int e) {
  const uint8_t* block = w.block_quants(g, b);
  if (w.kind == PackedKind::Q2_K || w.kind == PackedKind::Q3_K) {
    const int hf = e / 16, sh = (e % 16) / 4, byte = e % 4;
    int level = (block[hf * 64 + row * 4 + byte] >> (2 * sh)) & 3;
    if (w.kind == PackedKind::Q3_K) level |= static_cast<int>((w.high_bits(g, b)[row] >> (8 * byte + 4 * hf + sh)) & 1u) << 2;
    return level;
  }
  if (w.quant_bytes_per_block() == 512) return block[(e / 4) * 64 + row * 4 + e % 4];
  const uint8_t byte = block[((e % 16) / 4) * 64 + row * 4 + e % 4];
  const int nibble = e < 16 ? (byte & 0x0F) : (byte >> 4);
  switch (w.kind) {
    case PackedKind::IQ4_NL: case PackedKind::IQ4_XS: return kIq4nlValues[nibble] + 128;
    case PackedKind::MXFP4: return kMxfp4Values[nibble] + 128;
    case PackedKind::Q5_0:
    case PackedKind::Q5_1:
    case PackedKind::Q5_K: {
      const int k = (e % 16) / 4, i = e % 4;
      const int bit = e < 16 ? 8 * i + k : 8 * i + 4 + k;
      const uint32_t qh = w.kind == PackedKind::Q5_K ? w.high_bits(g, b)[row] : w.block_qh(g, b)[row];
      return nibble | static_cast<int>(((qh >> bit) & 1u) << 4);
    }
    case PackedKind::Q6_K: {
      const int hf = e / 16, k = (e % 16) / 4, i = e % 4;
      const uint32_t word = w.high_bits(g, b)[hf * PackedWeight::kRowsPerGroup + row];
      return nibble | static_cast<int>(((word >> (8 * i + 2 * k)) & 3u) << 4);
    }
    default: return nibble;
  }
}

float PackedWeight::block_scale(int64_t g, int64_t b, int i) const {
  const uint8_t* hdr = block_header(g, b);
  switch (kind) {
    case PackedKind::MXFP4: return e8m0_to_fp32_half(hdr[i]);
    case PackedKind::IQ4_XS: {
      BlockIQ4_XS x{};
      std::memcpy(&x.scales_h, hdr + kIq4xsScalesHOffset + 2 * i, 2);
      std::memcpy(x.scales_l, hdr + kIq4xsScalesLOffset + 4 * i, 4);
      return fp16_to_fp32(block_scales(g, b)[i]) * static_cast<float>(iq4xs_scale(x, static_cast<int>(b % 8)) - 32);
    }
    default: return fp16_to_fp32(block_scales(g, b)[i]);
  }
}

// The k-quants in the kernel's order: per super-block, integer sub-block
// dots (Q3_K's -4 and Q6_K's -32 offsets in them) times their integer
// scales, the minimums times the activations' sub-block sums, then one FMA
// each.
static void packed_gemm_reference_integer_scaled(const PackedWeight& w, int64_t g0, int64_t g1, const PackedActivations& x,
                                      float* y, int64_t ldy) {
  using PA = PackedActivations;
  constexpr int G = PackedWeight::kRowsPerGroup;
  // Q4_K and Q5_K: one sub-block per 32-element block; Q3_K and Q6_K: signed scales and a zero level.
  const bool per_block = PackedWeight::scale_per_block_of(w.kind);
  const bool has_min = PackedWeight::has_kmin_of(w.kind);
  const int32_t zero = PackedWeight::zero_level_of(w.kind);
  auto load = [](const uint8_t* p, auto v) {
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  for (int64_t g = g0; g < g1; g++)
    for (int i = 0; i < G && g * G + i < w.rows; i++)
      for (int64_t t = 0; t < x.n_tokens; t++) {
        const int tt = static_cast<int>(t % PA::kTokensPerTile);
        float acc = 0.0f;
        for (int64_t b0 = 0; b0 < w.n_blocks; b0 += 8) {
          int32_t isum = 0, msum = 0;
          for (int64_t b = b0; b < b0 + 8; b++) {
            const uint8_t* xb = x.block(t / PA::kTokensPerTile, b);
            const auto* qs = reinterpret_cast<const int8_t*>(xb + kQK8_0 * tt);
            // The activations' sums from their quants (not the tile's half/pair sums the kernel reads).
            int32_t half_sum[2] = {0, 0};
            for (int e = 0; e < kQK8_0; e++) half_sum[e / 16] += qs[e];
            if (per_block) {
              const int32_t bsum = half_sum[0] + half_sum[1];
              int32_t dot = 0;
              for (int e = 0; e < kQK8_0; e++) dot += packed_level(w, g, b, i, e) * qs[e];
              isum += dot * w.kq_scales(g, b)[(b % 8) * G + i];
              msum += w.q4k_min(g, b, i) * bsum;
              continue;
            }
            for (int hf = 0; hf < 2; hf++) {
              const int32_t bsum = half_sum[hf];
              int32_t dot = -zero * bsum;
              for (int e = 16 * hf; e < 16 * hf + 16; e++) dot += packed_level(w, g, b, i, e) * qs[e];
              const uint8_t sub = w.kq_scales(g, b)[(2 * (b % 8) + hf) * G + i];
              if (!has_min) {
                isum += dot * static_cast<int8_t>(sub);
              } else {
                isum += dot * (sub & 0xF);
                msum += (sub >> 4) * bsum;
              }
            }
          }
          const float dx = load(x.block(t / PA::kTokensPerTile, b0) + PA::kScaleOffset + 4 * tt, float{});
          acc = std::fma(static_cast<float>(isum), fp16_to_fp32(w.block_scales(g, b0)[i]) * dx, acc);
          if (has_min) acc = std::fma(static_cast<float>(-msum), fp16_to_fp32(w.block_mins(g, b0)[i]) * dx, acc);
        }
        y[t * ldy + g * G + i] = acc;
      }
}

void packed_gemm_reference(const PackedWeight& w, int64_t g0, int64_t g1, const PackedActivations& x, float* y,
                           int64_t ldy) {
  if (w.integer_scaled()) return packed_gemm_reference_integer_scaled(w, g0, g1, x, y, ldy);
  constexpr int G = PackedWeight::kRowsPerGroup;
  const int64_t nb = w.n_blocks;
  for (int64_t g = g0; g < g1; g++) {
    for (int i = 0; i < G && g * G + i < w.rows; i++)
      for (int64_t t = 0; t < x.n_tokens; t++) {
        float acc = 0.0f;
        for (int64_t b = 0; b < nb; b++) {
          const uint8_t* xb = x.block(t / PackedActivations::kTokensPerTile, b);
          const int tt = static_cast<int>(t % PackedActivations::kTokensPerTile);
          int32_t idot;
          float d;
          std::memcpy(&idot, xb + PackedActivations::kBiasOffset + 4 * tt, 4);
          std::memcpy(&d, xb + PackedActivations::kScaleOffset + 4 * tt, 4);
          const auto* qs = reinterpret_cast<const int8_t*>(xb + kQK8_0 * tt);
          for (int e = 0; e < kQK8_0; e++) idot += packed_level(w, g, b, i, e) * qs[e];
          acc = std::fma(static_cast<float>(idot), w.block_scale(g, b, i) * d, acc);
          if (w.has_min()) {
            float sx;
            std::memcpy(&sx, xb + PackedActivations::kSumOffset + 4 * tt, 4);
            acc = std::fma(fp16_to_fp32(w.block_mins(g, b)[i]), sx, acc);
          }
        }
        y[t * ldy + g * G + i] = acc;
      }
  }
}

const PackedGemm& avx512vnni_packed_gemm();  // kernels/x86/packed_q8_avx512vnni.cpp
const PackedGemm& avxvnni_packed_gemm();     // kernels/x86/packed_q8_avxvnni.cpp
const PackedGemm& avx2_packed_gemm();        // kernels/x86/packed_q8_avx2.cpp
const PackedGemm& avx512vl_vnni256_packed_gemm();  // kernels/x86/packed_q8_avx512vnni.cpp
const PackedGemm& amx_packed_gemm();               // kernels/x86/packed_q8_amx.cpp
const PackedGemm& amx_model_packed_gemm();         // kernels/x86/packed_q8_amx_model_avx512vnni.cpp
#ifdef KESTREL_HAVE_AMX_KERNELS
#define KESTREL_AMX_TABLE(accessor) (&(accessor)())
#else
#define KESTREL_AMX_TABLE(accessor) nullptr
#endif

const PackedGemm* packed_gemm(IsaLevel isa) {
  if (const auto* t = single_table<PackedGemm>(IsaNeed::Avx512Vnni, isa, KESTREL_SIMD_TABLE(avx512vnni_packed_gemm)))
    return t;
  if (const auto* t = single_table<PackedGemm>(IsaNeed::AvxVnni, isa, KESTREL_SIMD_TABLE(avxvnni_packed_gemm)))
    return t;
  return single_table<PackedGemm>(IsaNeed::Avx2, isa, KESTREL_SIMD_TABLE(avx2_packed_gemm));
}

const PackedGemm* packed_tile_gemm(IsaLevel isa) {
  return single_table<PackedGemm>(IsaNeed::Amx, isa, KESTREL_AMX_TABLE(amx_packed_gemm));
}

const PackedGemm* packed_tile_model_gemm() {
  return single_table<PackedGemm>(IsaNeed::Avx512Vnni, IsaLevel::Avx512, KESTREL_SIMD_TABLE(amx_model_packed_gemm));
}

std::vector<const PackedGemm*> runnable_packed_gemms() {
  std::vector<const PackedGemm*> out;
  auto add = [&](IsaNeed need, const PackedGemm* t) {
    if (const auto* r = single_table<PackedGemm>(need, IsaLevel::Avx512, t)) out.push_back(r);
  };
  add(IsaNeed::Avx2, KESTREL_SIMD_TABLE(avx2_packed_gemm));
  add(IsaNeed::AvxVnni, KESTREL_SIMD_TABLE(avxvnni_packed_gemm));
  add(IsaNeed::Avx512Vnni, KESTREL_SIMD_TABLE(avx512vl_vnni256_packed_gemm));
  add(IsaNeed::Avx512Vnni, KESTREL_SIMD_TABLE(avx512vnni_packed_gemm));
  if (const auto* amx = packed_tile_gemm(IsaLevel::Amx)) out.push_back(amx);
  if (const auto* model = packed_tile_model_gemm()) out.push_back(model);
  return out;
}

}  // namespace kestrel

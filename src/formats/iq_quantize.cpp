// Writers of the IQ1-IQ3 formats (iq_formats.h). ggml's quantizers were
// the model for the shape of the search (fold signs, fix the parity by
// flipping the cheapest weight, sweep scales, snap groups to the lattice);
// the search itself is ours: every candidate near the rounded point is
// scored with the real lattice values and the weights, and the groups are
// fitted again once the sub-block scales are rounded to what the format
// stores, so the error minimised is the error of the bytes written.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "formats/fp16.h"
#include "formats/iq_formats.h"
#include "formats/iq_grids.h"
#include "formats/scale_fit.h"

namespace kestrel {
namespace {

// A lattice's entries as coordinate values, and for every point of the
// full product of its coordinate levels the entries nearest to it, so a
// target is matched by rounding each coordinate and scoring a short list.
// The list's values are stored transposed (coordinate-major), so the
// candidates are scored side by side in vector lanes.
template <int Dim>
class Lattice {
 public:
  static constexpr int kCandidates = 16;

  template <typename Coord>
  Lattice(int n_entries, Coord coord) : values_(static_cast<size_t>(n_entries * Dim)) {
    for (int e = 0; e < n_entries; e++)
      for (int j = 0; j < Dim; j++) values_[static_cast<size_t>(e * Dim + j)] = coord(e, j);
    levels_ = values_;
    std::sort(levels_.begin(), levels_.end());
    levels_.erase(std::unique(levels_.begin(), levels_.end()), levels_.end());
    for (size_t i = 0; i + 1 < levels_.size(); i++) midpoints_.push_back(0.5f * (levels_[i] + levels_[i + 1]));
    const int L = static_cast<int>(levels_.size());
    int n_keys = 1;
    for (int j = 0; j < Dim; j++) n_keys *= L;
    keys_.resize(static_cast<size_t>(n_keys));
    std::vector<std::pair<float, uint16_t>> dist(static_cast<size_t>(n_entries));
    float p[Dim];
    for (int key = 0; key < n_keys; key++) {
      for (int j = 0, k = key; j < Dim; j++, k /= L) p[j] = levels_[static_cast<size_t>(k % L)];
      for (int e = 0; e < n_entries; e++) {
        float d = 0;
        for (int j = 0; j < Dim; j++) d += (p[j] - entry(e)[j]) * (p[j] - entry(e)[j]);
        dist[static_cast<size_t>(e)] = {d, static_cast<uint16_t>(e)};
      }
      std::partial_sort(dist.begin(), dist.begin() + kCandidates, dist.end());
      Key& k = keys_[static_cast<size_t>(key)];
      for (int c = 0; c < kCandidates; c++) {
        k.id[c] = dist[static_cast<size_t>(c)].second;
        for (int j = 0; j < Dim; j++) k.v[j][c] = entry(k.id[c])[j];
      }
    }
  }

  float max_value() const { return levels_.back(); }
  const float* entry(int e) const { return values_.data() + static_cast<size_t>(e) * Dim; }

  // The entry nearest to t under weights w; its weighted squared distance into *err.
  int nearest(const float* t, const float* w, float* err) const {
    const int L = static_cast<int>(levels_.size());
    int key = 0;
    for (int j = Dim - 1; j >= 0; j--) {
      int level = 0;  // the midpoints below t: counted, not searched (no branch to mispredict)
      for (int m = 0; m < L - 1; m++) level += t[j] > midpoints_[static_cast<size_t>(m)];
      key = key * L + level;
    }
    const Key& k = keys_[static_cast<size_t>(key)];
    float e[kCandidates] = {};
    for (int j = 0; j < Dim; j++)
      for (int c = 0; c < kCandidates; c++) {
        const float d = t[j] - k.v[j][c];
        e[c] += w[j] * d * d;
      }
    int best = 0;
    float best_e = e[0];
    for (int c = 1; c < kCandidates; c++) {  // selects, not branches: which candidate wins is data
      const bool lower = e[c] < best_e;
      best_e = lower ? e[c] : best_e;
      best = lower ? c : best;
    }
    *err = best_e;
    return k.id[best];
  }

 private:
  struct Key {
    float v[Dim][kCandidates];
    uint16_t id[kCandidates];
  };
  std::vector<float> values_, levels_, midpoints_;
  std::vector<Key> keys_;
};

template <typename T>
float byte_of(T word, int j) {
  return static_cast<float>((word >> (8 * j)) & 0xFF);
}

const Lattice<8>& lattice8(GgmlType t) {
  switch (t) {
    case GgmlType::IQ2_XXS: {
      static const Lattice<8> l(256, [](int e, int j) { return byte_of(kIq2xxsGrid[e], j); });
      return l;
    }
    case GgmlType::IQ2_XS: {
      static const Lattice<8> l(512, [](int e, int j) { return byte_of(kIq2xsGrid[e], j); });
      return l;
    }
    case GgmlType::IQ2_S: {
      static const Lattice<8> l(1024, [](int e, int j) { return byte_of(kIq2sGrid[e], j); });
      return l;
    }
    default: {  // IQ1_S, IQ1_M: int8 levels -1, 0, +1
      static const Lattice<8> l(2048, [](int e, int j) {
        return static_cast<float>(static_cast<int8_t>((kIq1sGrid[e] >> (8 * j)) & 0xFF));
      });
      return l;
    }
  }
}

const Lattice<4>& lattice4(GgmlType t) {
  if (t == GgmlType::IQ3_XXS) {
    static const Lattice<4> l(256, [](int e, int j) { return byte_of(kIq3xxsGrid[e], j); });
    return l;
  }
  static const Lattice<4> l(512, [](int e, int j) { return byte_of(kIq3sGrid[e], j); });
  return l;
}

enum class Signs { kNone, kParity7, kFree8 };

// How a type's values are built: value = d * (2l + 1) * unit * (entry + shift / 8).
struct Spec {
  int sub;      // weights per sub-block scale
  Signs signs;  // per 8 weights
  float unit;
  int lmax;     // largest sub-block scale code
  int shift;    // IQ1: weights per shift sign (32 or 8); 0: no shift
};

Spec spec(GgmlType t) {
  switch (t) {
    case GgmlType::IQ2_XXS: return {32, Signs::kParity7, 0.125f, 15, 0};
    case GgmlType::IQ2_XS: return {16, Signs::kParity7, 0.125f, 15, 0};
    case GgmlType::IQ2_S: return {16, Signs::kFree8, 0.125f, 15, 0};
    case GgmlType::IQ3_XXS: return {32, Signs::kParity7, 0.25f, 15, 0};
    case GgmlType::IQ3_S: return {32, Signs::kFree8, 1.0f, 15, 0};
    case GgmlType::IQ1_S: return {32, Signs::kNone, 1.0f, 7, 32};
    case GgmlType::IQ1_M: return {16, Signs::kNone, 1.0f, 7, 8};
    default: throw Error("quantize_row_iq: " + std::string(type_name(t)) + " is not an IQ1-IQ3 type");
  }
}

// One sub-block's fit at a given scale: lattice entries per group of
// dim() weights, shift signs per 8 (IQ1), weighted sums for the scale.
struct SubFit {
  std::array<uint16_t, 8> idx{};
  std::array<int8_t, 4> shift{};
  float err = 0, sumqx = 0, sumq2 = 0;
};

// a: the sub-block's (sign-folded) weights, w: their weights, s: the scale
// in lattice units. shift_all: IQ1_S's one shift sign for the sub-block.
template <int Dim>
SubFit fit_at(const Spec& sp, const Lattice<Dim>& lat, const float* a, const float* w, float s, int shift_all) {
  SubFit f;
  const float inv_s = 1.0f / s;
  float t[Dim], dist = 0;  // dist: the weighted squared distance in lattice units (err / s²)
  auto accumulate = [&](const float* aa, const float* ww, int e, float off) {
    const float* v = lat.entry(e);
    for (int j = 0; j < Dim; j++) {
      const float q = v[j] + off;
      f.sumqx += ww[j] * aa[j] * q, f.sumq2 += ww[j] * q * q;
    }
  };
  if constexpr (Dim == 8) {  // IQ1 (8-wide lattice): a shift sign per group, chosen here or given
    if (sp.shift != 0) {
      for (int g = 0; g < sp.sub / 8; g++) {
        const float* ag = a + 8 * g;
        int best_shift = 1, best_idx = 0;
        float best = INFINITY;
        for (int sh : {1, -1}) {
          if (shift_all && sh != shift_all) continue;
          for (int j = 0; j < 8; j++) t[j] = ag[j] * inv_s - static_cast<float>(sh) * 0.125f;
          float e;
          const int idx = lat.nearest(t, w + 8 * g, &e);
          if (e < best) best = e, best_shift = sh, best_idx = idx;
        }
        f.idx[static_cast<size_t>(g)] = static_cast<uint16_t>(best_idx);
        f.shift[static_cast<size_t>(g)] = static_cast<int8_t>(best_shift);
        dist += best;
        accumulate(ag, w + 8 * g, best_idx, static_cast<float>(best_shift) * 0.125f);
      }
      f.err = dist * s * s;
      return f;
    }
  }
  for (int g = 0; g < sp.sub / Dim; g++) {
    const float* ag = a + g * Dim;
    for (int j = 0; j < Dim; j++) t[j] = ag[j] * inv_s;
    float e;
    f.idx[static_cast<size_t>(g)] = static_cast<uint16_t>(lat.nearest(t, w + g * Dim, &e));
    dist += e;
    accumulate(ag, w + g * Dim, f.idx[static_cast<size_t>(g)], 0);
  }
  f.err = dist * s * s;
  return f;
}

// The best free scale for a sub-block: a sweep of scales around the one
// that maps the largest weight onto the lattice's largest value, each
// refined to the least-squares scale of its assignment.
template <int Dim>
float best_scale(const Spec& sp, const Lattice<Dim>& lat, const float* a, const float* w) {
  float amax = 0;
  for (int j = 0; j < sp.sub; j++) amax = std::max(amax, std::fabs(a[j]));
  if (amax < 1e-30f) return 0;
  const float top = lat.max_value() + (sp.shift ? 0.125f : 0.0f);
  float best_s = 0;
  float best_score = 0;
  for (int k = 0; k <= 16; k++) {
    const float s = amax / (top * (0.7f + 0.04f * static_cast<float>(k)));
    for (int sh : {1, -1}) {
      if (sh == -1 && sp.shift != 32) continue;
      const SubFit f = fit_at(sp, lat, a, w, s, sp.shift == 32 ? sh : 0);
      if (f.sumq2 > 0 && f.sumqx > 0 && f.sumqx * f.sumqx > best_score * f.sumq2) {
        best_score = f.sumqx * f.sumqx / f.sumq2;
        best_s = f.sumqx / f.sumq2;
      }
    }
  }
  return best_s;
}

// The fit of a sub-block at its stored scale d * (2l + 1) * unit, the best of the codes near its free scale.
struct Coded {
  int l = 0;
  SubFit fit;
};

template <int Dim>
Coded code_sub(const Spec& sp, const Lattice<Dim>& lat, const float* a, const float* w, float free_scale, float d) {
  Coded best;
  best.fit.err = INFINITY;
  const int l0 = std::clamp(static_cast<int>(std::lround((free_scale / (sp.unit * d) - 1) / 2)), 0, sp.lmax);
  for (int l = std::max(0, l0 - 1); l <= std::min(sp.lmax, l0 + 1); l++) {
    const float s = d * static_cast<float>(2 * l + 1) * sp.unit;
    for (int sh : {1, -1}) {
      if (sh == -1 && sp.shift != 32) continue;
      SubFit f = fit_at(sp, lat, a, w, s, sp.shift == 32 ? sh : 0);
      if (f.err < best.fit.err) best = {l, f};
    }
  }
  return best;
}

// Signs folded out of a group of 8: magnitudes in a, the stored sign bits
// returned. With a 7-bit field the count of negatives must be even: the
// weight cheapest to get wrong keeps its sign and is fitted negated.
uint8_t fold_signs(Signs mode, const float* x, const float* w, float* a) {
  uint8_t bits = 0;
  for (int j = 0; j < 8; j++) {
    a[j] = std::fabs(x[j]);
    if (x[j] < 0) bits |= static_cast<uint8_t>(1 << j);
  }
  if (mode == Signs::kParity7 && (__builtin_popcount(bits) & 1)) {
    int jmin = 0;
    for (int j = 1; j < 8; j++)
      if (w[j] * x[j] * x[j] < w[jmin] * x[jmin] * x[jmin]) jmin = j;
    bits ^= static_cast<uint8_t>(1 << jmin);
    a[jmin] = -a[jmin];
  }
  return bits;
}

struct BlockFit {
  float d = 0;                        // the stored fp16 scale, widened
  int l[16] = {};                     // sub-block scale codes
  uint16_t idx[64] = {};              // lattice entry per group of dim() weights
  int8_t shift[32] = {};              // IQ1: shift sign per 8
  uint8_t signs[32] = {};             // sign bits per 8
};

template <int Dim>
void fit_block(const Spec& sp, const Lattice<Dim>& lat, const float* x, const float* imp, BlockFit& b) {
  float w[256], a[256];
  if (imp) {
    importance_weights(x, imp, 256, 256, w);
  } else {
    for (int j = 0; j < 256; j++) w[j] = x[j] * x[j];
  }
  for (int g = 0; g < 32; g++) {
    if (sp.signs == Signs::kNone) std::memcpy(a + 8 * g, x + 8 * g, 32);
    else b.signs[g] = fold_signs(sp.signs, x + 8 * g, w + 8 * g, a + 8 * g);
  }
  const int n_sub = 256 / sp.sub;
  float scales[16];
  float max_scale = 0;
  for (int k = 0; k < n_sub; k++) {
    scales[k] = best_scale(sp, lat, a + k * sp.sub, w + k * sp.sub);
    max_scale = std::max(max_scale, scales[k]);
  }
  const uint16_t d16 = fp32_to_fp16(max_scale / (sp.unit * static_cast<float>(2 * sp.lmax + 1)));
  b.d = fp16_to_fp32(d16);
  if (!(b.d > 0) || !std::isfinite(b.d)) {
    b = BlockFit{};
    for (auto& s : b.shift) s = 1;
    return;
  }
  const int groups = sp.sub / Dim;
  for (int k = 0; k < n_sub; k++) {
    const Coded c = code_sub(sp, lat, a + k * sp.sub, w + k * sp.sub, scales[k], b.d);
    b.l[k] = c.l;
    for (int g = 0; g < groups; g++) b.idx[k * groups + g] = c.fit.idx[static_cast<size_t>(g)];
    for (int g = 0; g < sp.sub / 8; g++) b.shift[k * (sp.sub / 8) + g] = c.fit.shift[static_cast<size_t>(g)];
  }
}

// --- packing, field by field as iq_formats.h describes -------------------

void put32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }

void pack(GgmlType type, const BlockFit& f, void* out) {
  const uint16_t d16 = fp32_to_fp16(f.d);
  switch (type) {
    case GgmlType::IQ2_XXS: {
      auto& b = *static_cast<BlockIQ2_XXS*>(out);
      b.d = d16;
      for (int ib = 0; ib < 8; ib++) {
        uint32_t idx = 0, aux = static_cast<uint32_t>(f.l[ib]) << 28;
        for (int k = 0; k < 4; k++) idx |= static_cast<uint32_t>(f.idx[4 * ib + k]) << (8 * k);
        for (int k = 0; k < 4; k++) aux |= static_cast<uint32_t>(f.signs[4 * ib + k] & 127) << (7 * k);
        put32(reinterpret_cast<uint8_t*>(b.qs + 4 * ib), idx);
        put32(reinterpret_cast<uint8_t*>(b.qs + 4 * ib + 2), aux);
      }
      return;
    }
    case GgmlType::IQ2_XS: {
      auto& b = *static_cast<BlockIQ2_XS*>(out);
      b.d = d16;
      for (int g = 0; g < 32; g++) b.qs[g] = static_cast<uint16_t>(f.idx[g] | ((f.signs[g] & 127) << 9));
      for (int ib = 0; ib < 8; ib++) b.scales[ib] = static_cast<uint8_t>(f.l[2 * ib] | (f.l[2 * ib + 1] << 4));
      return;
    }
    case GgmlType::IQ2_S: {
      auto& b = *static_cast<BlockIQ2_S*>(out);
      b.d = d16;
      std::memset(b.qh, 0, sizeof b.qh);
      for (int g = 0; g < 32; g++) {
        b.qs[g] = static_cast<uint8_t>(f.idx[g] & 0xFF);
        b.qh[g / 4] |= static_cast<uint8_t>((f.idx[g] >> 8) << (2 * (g % 4)));
        b.qs[32 + g] = f.signs[g];
      }
      for (int ib = 0; ib < 8; ib++) b.scales[ib] = static_cast<uint8_t>(f.l[2 * ib] | (f.l[2 * ib + 1] << 4));
      return;
    }
    case GgmlType::IQ3_XXS: {
      auto& b = *static_cast<BlockIQ3_XXS*>(out);
      b.d = d16;
      for (int q = 0; q < 64; q++) b.qs[q] = static_cast<uint8_t>(f.idx[q]);
      for (int ib = 0; ib < 8; ib++) {
        uint32_t aux = static_cast<uint32_t>(f.l[ib]) << 28;
        for (int k = 0; k < 4; k++) aux |= static_cast<uint32_t>(f.signs[4 * ib + k] & 127) << (7 * k);
        put32(b.qs + 64 + 4 * ib, aux);
      }
      return;
    }
    case GgmlType::IQ3_S: {
      auto& b = *static_cast<BlockIQ3_S*>(out);
      b.d = d16;
      std::memset(b.qh, 0, sizeof b.qh);
      for (int q = 0; q < 64; q++) {
        b.qs[q] = static_cast<uint8_t>(f.idx[q] & 0xFF);
        b.qh[q / 8] |= static_cast<uint8_t>((f.idx[q] >> 8) << (q % 8));
      }
      for (int g = 0; g < 32; g++) b.signs[g] = f.signs[g];
      for (int k = 0; k < 4; k++) b.scales[k] = static_cast<uint8_t>(f.l[2 * k] | (f.l[2 * k + 1] << 4));
      return;
    }
    case GgmlType::IQ1_S: {
      auto& b = *static_cast<BlockIQ1_S*>(out);
      b.d = d16;
      for (int ib = 0; ib < 8; ib++) {
        uint32_t h = static_cast<uint32_t>(f.l[ib]) << 12 | (f.shift[4 * ib] < 0 ? 0x8000u : 0u);
        for (int k = 0; k < 4; k++) {
          b.qs[4 * ib + k] = static_cast<uint8_t>(f.idx[4 * ib + k] & 0xFF);
          h |= static_cast<uint32_t>(f.idx[4 * ib + k] >> 8) << (3 * k);
        }
        b.qh[ib] = static_cast<uint16_t>(h);
      }
      return;
    }
    case GgmlType::IQ1_M: {
      auto& b = *static_cast<BlockIQ1_M*>(out);
      for (int g = 0; g < 32; g++) {
        b.qs[g] = static_cast<uint8_t>(f.idx[g] & 0xFF);
        const uint32_t nib = (f.idx[g] >> 8) | (f.shift[g] < 0 ? 8u : 0u);
        if (g % 2 == 0) b.qh[g / 2] = static_cast<uint8_t>(nib);
        else b.qh[g / 2] |= static_cast<uint8_t>(nib << 4);
      }
      uint16_t sc[4];
      for (int k = 0; k < 4; k++) {
        // Word k: sub-blocks 4k .. 4k + 3 (3 bits each), then nibble k of the fp16 scale.
        sc[k] = static_cast<uint16_t>(f.l[4 * k] | (f.l[4 * k + 1] << 3) | (f.l[4 * k + 2] << 6) | (f.l[4 * k + 3] << 9) |
                                      (((d16 >> (4 * k)) & 0xF) << 12));
      }
      std::memcpy(b.scales, sc, 8);
      return;
    }
    default: throw Error("quantize_row_iq: " + std::string(type_name(type)) + " is not an IQ1-IQ3 type");
  }
}

template <int Dim>
void quantize_rows(GgmlType type, const Lattice<Dim>& lat, const float* x, void* dst, int64_t n, const float* importance) {
  const Spec sp = spec(type);
  const size_t block_bytes = traits(type).type_size;
  BlockFit f;
  for (int64_t i = 0; i < n / 256; i++) {
    f = BlockFit{};
    fit_block(sp, lat, x + 256 * i, importance ? importance + 256 * i : nullptr, f);
    pack(type, f, static_cast<uint8_t*>(dst) + i * block_bytes);
  }
}

}  // namespace

void quantize_row_iq(GgmlType type, const float* x, void* dst, int64_t n, const float* importance) {
  (void)spec(type);  // refuses a type that is not one of these
  if (type == GgmlType::IQ3_XXS || type == GgmlType::IQ3_S) quantize_rows(type, lattice4(type), x, dst, n, importance);
  else quantize_rows(type, lattice8(type), x, dst, n, importance);
}

}  // namespace kestrel

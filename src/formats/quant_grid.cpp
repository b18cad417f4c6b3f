#include "formats/quant_grid.h"

#include <algorithm>
#include <cmath>

#include "formats/block_formats.h"
#include "formats/fp16.h"
#include "formats/fp8.h"
#include "formats/kquant_formats.h"

namespace kestrel {
namespace {

// Nearest level of the grid value = a * level + b, level in [lo, hi].
inline int nearest_level(float w, float a, float b, int lo, int hi) {
  if (a == 0) return lo;
  return std::clamp(static_cast<int>(std::lround((w - b) / a)), lo, hi);
}

inline void set_nibble(uint8_t& byte, bool high, int v) {
  byte = high ? static_cast<uint8_t>((byte & 0x0F) | (v << 4)) : static_cast<uint8_t>((byte & 0xF0) | v);
}

// Q4_K / Q5_K sub-block scale and min, as the decoder reads them.
void k4_scale_min(const uint8_t* q, int s, float d, float dmin, float& a, float& m) {
  int sc, mn;
  unpack_scale_min_k4(q, s, sc, mn);
  a = d * static_cast<float>(sc);
  m = dmin * static_cast<float>(mn);
}

}  // namespace

bool has_quant_grid(GgmlType t) {
  switch (t) {
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::KESTREL_FP8_E4M3:
      return true;
    default:
      return false;
  }
}

float snap_to_grid(GgmlType type, void* block, int j, float w) {
  switch (type) {
    case GgmlType::Q8_0: {
      auto* b = static_cast<BlockQ8_0*>(block);
      const float d = fp16_to_fp32(b->d);
      const int l = nearest_level(w, d, 0, -127, 127);
      b->qs[j] = static_cast<int8_t>(l);
      return d * static_cast<float>(l);
    }
    case GgmlType::Q4_0: {
      auto* b = static_cast<BlockQ4_0*>(block);
      const float d = fp16_to_fp32(b->d);
      const int l = nearest_level(w, d, -8 * d, 0, 15);
      set_nibble(b->qs[j % 16], j >= 16, l);
      return d * static_cast<float>(l - 8);
    }
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: {
      const bool five = type == GgmlType::Q5_K;
      uint16_t dh, dminh;
      const uint8_t* scales;
      uint8_t* qs;
      if (five) {
        auto* b = static_cast<BlockQ5_K*>(block);
        dh = b->d, dminh = b->dmin, scales = b->scales, qs = b->qs;
      } else {
        auto* b = static_cast<BlockQ4_K*>(block);
        dh = b->d, dminh = b->dmin, scales = b->scales, qs = b->qs;
      }
      float a, m;
      k4_scale_min(scales, j / 32, fp16_to_fp32(dh), fp16_to_fp32(dminh), a, m);
      const int l = nearest_level(w, a, -m, 0, five ? 31 : 15);
      // Element j: chunk j/64, low nibbles for its first 32, high for the rest.
      const int chunk = j / 64, l32 = j % 32;
      const bool high = (j % 64) >= 32;
      set_nibble(qs[chunk * 32 + l32], high, l & 0xF);
      if (five) {
        auto* b = static_cast<BlockQ5_K*>(block);
        const auto bit = static_cast<uint8_t>(1u << (2 * chunk + (high ? 1 : 0)));
        b->qh[l32] = static_cast<uint8_t>((l & 16) ? (b->qh[l32] | bit) : (b->qh[l32] & ~bit));
      }
      return a * static_cast<float>(l) - m;
    }
    case GgmlType::Q6_K: {
      auto* b = static_cast<BlockQ6_K*>(block);
      const float a = fp16_to_fp32(b->d) * static_cast<float>(b->scales[j / 16]);
      const int l = nearest_level(w, a, -32 * a, 0, 63);
      // Element j: half j/128; within it quarter (j%128)/32 and lane j%32.
      const int half = j / 128, quarter = (j % 128) / 32, lane = j % 32;
      set_nibble(b->ql[half * 64 + lane + (quarter & 1) * 32], quarter >= 2, l & 0xF);
      uint8_t& qh = b->qh[half * 32 + lane];
      qh = static_cast<uint8_t>((qh & ~(3 << (2 * quarter))) | ((l >> 4) << (2 * quarter)));
      return a * static_cast<float>(l - 32);
    }
    case GgmlType::KESTREL_FP8_E4M3: {
      auto* b = static_cast<BlockFp8*>(block);
      const float d = fp16_to_fp32(b->d);
      b->qs[j] = d ? fp32_to_e4m3(w / d) : 0;
      return d * e4m3_to_fp32(b->qs[j]);
    }
    default:
      return w;
  }
}

}  // namespace kestrel

#pragma once
// FP8 E4M3 (the "fn" variant of OCP FP8 / NVIDIA Hopper: 1 sign, 4 exponent
// bits with bias 7, 3 mantissa bits, no infinities, 0x7F/0xFF are NaN, largest
// finite 448). Encoding rounds to nearest even and saturates at ±448, so a
// scale that maps a block's max |x| to 448 never overflows.
#include <array>
#include <cmath>
#include <cstdint>

namespace kestrel {

constexpr float kFp8E4M3Max = 448.0f;

inline uint8_t fp32_to_e4m3(float f) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  if (std::isnan(f)) return sign | 0x7F;
  float a = std::fabs(f);
  if (a >= kFp8E4M3Max) return sign | 0x7E;
  if (a < 0x1.0p-6f) {  // subnormal: multiples of 2^-9 (a code of 8 is the smallest normal)
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));
  }
  int e;
  const float m = std::frexp(a, &e);                           // a = m * 2^e, m in [0.5, 1)
  int mant = static_cast<int>(std::nearbyint(m * 16.0f)) - 8;  // 3 bits below the implicit one
  int exp = e - 1 + 7;
  if (mant == 8) mant = 0, exp++;
  if (exp > 15 || (exp == 15 && mant > 6)) return sign | 0x7E;
  return sign | static_cast<uint8_t>((exp << 3) | mant);
}

inline const std::array<float, 256>& e4m3_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; c++) {
      const int exp = (c >> 3) & 15, mant = c & 7;
      float v;
      if ((c & 0x7F) == 0x7F)
        v = NAN;
      else if (exp == 0)
        v = std::ldexp(static_cast<float>(mant), -9);
      else
        v = std::ldexp(1.0f + mant / 8.0f, exp - 7);
      t[c] = (c & 0x80) ? -v : v;
    }
    return t;
  }();
  return table;
}

inline float e4m3_to_fp32(uint8_t c) { return e4m3_table()[c]; }

}  // namespace kestrel

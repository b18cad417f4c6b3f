#pragma once
// The lattices of the IQ1-IQ3 weight formats (iq_formats.h), as GGUF
// defines them, and the sign patterns their 7-bit sign fields stand for.
#include <array>
#include <cstdint>

namespace kestrel {

// 8 magnitudes per entry (bytes 8, 25, 43), lowest element in the lowest byte.
extern const uint64_t kIq2xxsGrid[256];
extern const uint64_t kIq2xsGrid[512];
extern const uint64_t kIq2sGrid[1024];
// 4 magnitudes per entry (bytes 4 .. 62).
extern const uint32_t kIq3xxsGrid[256];
extern const uint32_t kIq3sGrid[512];
// 8 levels per entry, int8 bytes -1, 0, +1.
extern const uint64_t kIq1sGrid[2048];

// A 7-bit sign field stores the signs of 7 of a group's 8 weights; the 8th
// makes the count of negatives even. The 8-bit pattern (bit j: weight j negative).
constexpr uint8_t iq_signs8(uint32_t s7) {
  const uint32_t parity = __builtin_popcount(s7 & 127) & 1;
  return static_cast<uint8_t>((s7 & 127) | (parity << 7));
}

// An 8-bit sign pattern as 8 bytes of +1 / -1 (int8), for multiplying bytes lane-wise.
constexpr uint64_t iq_sign_bytes(uint8_t signs) {
  uint64_t r = 0;
  for (int j = 0; j < 8; j++) r |= static_cast<uint64_t>((signs >> j) & 1 ? 0xFF : 0x01) << (8 * j);
  return r;
}

// iq_sign_bytes(iq_signs8(s7)) for every 7-bit field.
inline constexpr std::array<uint64_t, 128> kIqSignBytes7 = [] {
  std::array<uint64_t, 128> t{};
  for (uint32_t i = 0; i < 128; i++) t[i] = iq_sign_bytes(iq_signs8(i));
  return t;
}();

}  // namespace kestrel

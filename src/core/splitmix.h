#pragma once
// SplitMix64 (Steele, Lea, Flood): a 64-bit generator whose every output is a well-mixed function of its state,
// which each call advances by the golden-ratio step. Synth's random weights and the media placeholders of a prompt
// (runtime/request.h) draw from it.
#include <cstdint>

namespace kestrel {

inline uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A uniform double in [0, 1) from the next output (its top 53 bits).
inline double splitmix_unit(uint64_t& s) { return static_cast<double>(splitmix64(s) >> 11) * 0x1.0p-53; }

}  // namespace kestrel

#pragma once
// FP8 E4M3 to float, 8 at a time, for translation units compiled with AVX2
// and F16C (and only called where the CPU has them): E4M3 bits moved into an
// fp16 (sign to bit 15, exponent and mantissa shifted up by 7) encode the
// value / 256 for every finite code, subnormals included, so a scale times
// 256 restores it exactly. In an unnamed namespace: the files including it are compiled for different ISAs
// (AVX2, AVX-512), and an inline function of one name would leave the linker free to keep the AVX-512 file's
// compilation (EVEX encodings) for the AVX2 callers too.
#include <immintrin.h>

#include <cstdint>

namespace kestrel {
namespace {

inline __m256 e4m3x8_div256(const uint8_t* q) {
  const __m128i b = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q)));
  const __m128i h = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x7F)), 7),
                                 _mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x80)), 8));
  return _mm256_cvtph_ps(h);
}

}  // namespace
}  // namespace kestrel

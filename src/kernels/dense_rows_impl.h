#pragma once
// The bodies of dense_rows.h's kernels, included by each ISA's file (compiled with its flags). They sit in an
// unnamed namespace: each file must keep its own compilation (as inline functions of one name the linker would
// keep one of them, the baseline's, for every table).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/exp_cephes.h"

namespace kestrel::dense_rows_impl {
namespace {

// Cephes' expf for x <= 0 (a softmax with its maximum subtracted), branch-free so that the loops vectorize;
// relative error ~1e-7. Below -80 it gives e^-80 (1.8e-35) rather than values that end denormal: a softmax
// row holds a 1 (its maximum), so the difference is nothing, while denormals cost the softmax and the product
// after it tens of cycles an element (measured: 4x the time of a SigLIP layer's attention).
float exp_nonpositive(float x) {
  using namespace exp_cephes;
  // Written so that the loops calling it vectorize (with std::max and std::floor the compiler kept one exp at a
  // time: 3.6 ns an element, more than the scores and the product together): the clamp at -80 as an unsigned
  // minimum of the bits (for x <= 0, +0 included, a float's bits grow with its magnitude), and floor(x log2e +
  // 0.5) as a truncation of the sum moved to positive values (x log2e >= -116 here).
  x = std::bit_cast<float>(std::min(std::bit_cast<uint32_t>(x), 0xC2A00000u));  // -80
  const int32_t ni = static_cast<int32_t>(x * kLog2e + 128.5f) - 128;
  const float n = static_cast<float>(ni);
  const float r = x - n * kLn2Hi - n * kLn2Lo;
  float p = kPoly[0];
  p = p * r + kPoly[1];
  p = p * r + kPoly[2];
  p = p * r + kPoly[3];
  p = p * r + kPoly[4];
  p = p * r + kPoly[5];
  const float e = p * r * r + r + 1.0f;
  return e * std::bit_cast<float>((ni + 127) << 23);
}

// The maximum and the sum run in 16 lanes (elementwise steps the compiler vectorizes without reassociating a
// reduction), folded at the end.
void softmax(float* p, int64_t rows, int64_t len, float scale) {
  constexpr int64_t kL = 16;
  for (int64_t i = 0; i < rows; i++) {
    float* row = p + i * len;
    float lane[kL];
    for (int64_t x = 0; x < kL; x++) lane[x] = -INFINITY;
    int64_t j = 0;
    for (; j + kL <= len; j += kL)
      for (int64_t x = 0; x < kL; x++) lane[x] = std::max(lane[x], row[j + x]);
    float m = -INFINITY;
    for (int64_t x = 0; x < kL; x++) m = std::max(m, lane[x]);
    for (int64_t r = j; r < len; r++) m = std::max(m, row[r]);
    for (int64_t k = 0; k < len; k++) row[k] = exp_nonpositive((row[k] - m) * scale);
    for (int64_t x = 0; x < kL; x++) lane[x] = 0.0f;
    for (j = 0; j + kL <= len; j += kL)
      for (int64_t x = 0; x < kL; x++) lane[x] += row[j + x];
    float sum = 0.0f;
    for (int64_t x = 0; x < kL; x++) sum += lane[x];
    for (int64_t r = j; r < len; r++) sum += row[r];
    const float inv = 1.0f / sum;
    for (int64_t k = 0; k < len; k++) row[k] *= inv;
  }
}

// Outer-product blocks: 4 queries x 64 keys of accumulators (16 vectors of 16 on AVX-512), one broadcast query
// value and one key row slice per step of d; the rest of the queries one at a time. kt's rows are ldk >= len
// floats, ldk a multiple of 64 (zeros past len), so that the last block of keys is computed whole and only its
// first len % 64 columns stored (a scalar tail for those columns took a fifth of the time at len 1500).
void scores(const float* q, int64_t nq, int hd, const float* kt, int64_t ldk, int64_t len, float* s) {
  constexpr int64_t kQ = 4, kJ = 64;
  for (int64_t j = 0; j < len; j += kJ) {
    const size_t cols = sizeof(float) * static_cast<size_t>(std::min(kJ, len - j));
    int64_t t = 0;
    for (; t + kQ <= nq; t += kQ) {
      float acc[kQ][kJ] = {};
      for (int d = 0; d < hd; d++) {
        const float* kr = kt + static_cast<int64_t>(d) * ldk + j;
        for (int64_t a = 0; a < kQ; a++) {
          const float qv = q[(t + a) * hd + d];
          for (int64_t x = 0; x < kJ; x++) acc[a][x] += qv * kr[x];
        }
      }
      for (int64_t a = 0; a < kQ; a++) std::memcpy(s + (t + a) * len + j, acc[a], cols);
    }
    for (; t < nq; t++) {
      float acc[kJ] = {};
      for (int d = 0; d < hd; d++) {
        const float qv = q[t * hd + d];
        const float* kr = kt + static_cast<int64_t>(d) * ldk + j;
        for (int64_t x = 0; x < kJ; x++) acc[x] += qv * kr[x];
      }
      std::memcpy(s + t * len + j, acc, cols);
    }
  }
}

}  // namespace
}  // namespace kestrel::dense_rows_impl

#pragma once
// The bodies of dense_rows.h's kernels, included by each ISA's file (compiled with its flags). They sit in an
// unnamed namespace: each file must keep its own compilation (as inline functions of one name the linker would
// keep one of them, the baseline's, for every table).
#include <algorithm>
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
  x = std::max(x, -80.0f);
  const float n = std::floor(x * kLog2e + 0.5f);
  const float r = x - n * kLn2Hi - n * kLn2Lo;
  float p = kPoly[0];
  for (int i = 1; i < 6; i++) p = p * r + kPoly[i];
  const float e = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return e * scale;
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
// value and one key row slice per step of d; the rest one query / one key at a time.
void scores(const float* q, int64_t nq, int hd, const float* kt, int64_t len, float* s) {
  constexpr int64_t kQ = 4, kJ = 64;
  int64_t j = 0;
  for (; j + kJ <= len; j += kJ) {
    int64_t t = 0;
    for (; t + kQ <= nq; t += kQ) {
      float acc[kQ][kJ] = {};
      for (int d = 0; d < hd; d++) {
        const float* kr = kt + static_cast<int64_t>(d) * len + j;
        for (int64_t a = 0; a < kQ; a++) {
          const float qv = q[(t + a) * hd + d];
          for (int64_t x = 0; x < kJ; x++) acc[a][x] += qv * kr[x];
        }
      }
      for (int64_t a = 0; a < kQ; a++) std::memcpy(s + (t + a) * len + j, acc[a], sizeof acc[a]);
    }
    for (; t < nq; t++) {
      float acc[kJ] = {};
      for (int d = 0; d < hd; d++) {
        const float qv = q[t * hd + d];
        const float* kr = kt + static_cast<int64_t>(d) * len + j;
        for (int64_t x = 0; x < kJ; x++) acc[x] += qv * kr[x];
      }
      std::memcpy(s + t * len + j, acc, sizeof acc);
    }
  }
  for (; j < len; j++)
    for (int64_t t = 0; t < nq; t++) {
      float acc = 0.0f;
      for (int d = 0; d < hd; d++) acc += q[t * hd + d] * kt[static_cast<int64_t>(d) * len + j];
      s[t * len + j] = acc;
    }
}

}  // namespace
}  // namespace kestrel::dense_rows_impl

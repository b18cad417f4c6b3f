#include "core/q4q5_formats.h"

#include <algorithm>
#include <cmath>

#include "core/fp16.h"

namespace kestrel {
namespace {

struct MinMax {
  float min, max;
};
MinMax min_max(const float* x) {
  MinMax r{x[0], x[0]};
  for (int j = 1; j < kQK32; j++) r.min = std::min(r.min, x[j]), r.max = std::max(r.max, x[j]);
  return r;
}

// Levels 0..nmax of x ~ d * l + min; the level nibbles and (nmax 31) fifth bits written into qs / qh.
void pack_levels(const float* x, float min, float id, int nmax, uint8_t* qs, uint8_t* qh) {
  uint32_t high = 0;
  for (int j = 0; j < kQK32 / 2; j++) {
    const int l0 = std::min(nmax, static_cast<int>((x[j] - min) * id + 0.5f));
    const int l1 = std::min(nmax, static_cast<int>((x[j + 16] - min) * id + 0.5f));
    qs[j] = static_cast<uint8_t>((l0 & 0xF) | ((l1 & 0xF) << 4));
    high |= static_cast<uint32_t>((l0 >> 4) & 1) << j;
    high |= static_cast<uint32_t>((l1 >> 4) & 1) << (j + 16);
  }
  if (qh) std::memcpy(qh, &high, 4);
}

}  // namespace

void quantize_row_q4_1(const float* x, BlockQ4_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK32; i++, x += kQK32) {
    const MinMax mm = min_max(x);
    const float d = (mm.max - mm.min) / 15, id = d ? 1 / d : 0;
    y[i].d = fp32_to_fp16(d);
    y[i].m = fp32_to_fp16(mm.min);
    pack_levels(x, mm.min, id, 15, y[i].qs, nullptr);
  }
}

void quantize_row_q5_1(const float* x, BlockQ5_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK32; i++, x += kQK32) {
    const MinMax mm = min_max(x);
    const float d = (mm.max - mm.min) / 31, id = d ? 1 / d : 0;
    y[i].d = fp32_to_fp16(d);
    y[i].m = fp32_to_fp16(mm.min);
    pack_levels(x, mm.min, id, 31, y[i].qs, y[i].qh);
  }
}

void quantize_row_q5_0(const float* x, BlockQ5_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK32; i++, x += kQK32) {
    // The element of largest magnitude (with its sign) maps to level -16.
    float amax = 0, max = 0;
    for (int j = 0; j < kQK32; j++)
      if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), max = x[j];
    const float d = max / -16, id = d ? 1 / d : 0;
    y[i].d = fp32_to_fp16(d);
    uint32_t high = 0;
    for (int j = 0; j < kQK32 / 2; j++) {
      const int l0 = std::min(31, static_cast<int>(x[j] * id + 16.5f));
      const int l1 = std::min(31, static_cast<int>(x[j + 16] * id + 16.5f));
      y[i].qs[j] = static_cast<uint8_t>((l0 & 0xF) | ((l1 & 0xF) << 4));
      high |= static_cast<uint32_t>((l0 >> 4) & 1) << j;
      high |= static_cast<uint32_t>((l1 >> 4) & 1) << (j + 16);
    }
    std::memcpy(y[i].qh, &high, 4);
  }
}

void quantize_row_q8_1(const float* x, BlockQ8_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK32; i++, x += kQK32) {
    float amax = 0;
    for (int j = 0; j < kQK32; j++) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127, id = amax != 0 ? 127 / amax : 0;
    int sum = 0;
    for (int j = 0; j < kQK32; j++) {
      y[i].qs[j] = static_cast<int8_t>(std::nearbyint(x[j] * id));
      sum += y[i].qs[j];
    }
    y[i].d = fp32_to_fp16(d);
    y[i].s = fp32_to_fp16(d * static_cast<float>(sum));
  }
}

void dequantize_row_q4_1(const BlockQ4_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK32; i++, y += kQK32) {
    const float d = fp16_to_fp32(x[i].d), m = fp16_to_fp32(x[i].m);
    for (int j = 0; j < kQK32 / 2; j++) {
      y[j] = static_cast<float>(x[i].qs[j] & 0xF) * d + m;
      y[j + 16] = static_cast<float>(x[i].qs[j] >> 4) * d + m;
    }
  }
}

void dequantize_row_q5_0(const BlockQ5_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK32; i++, y += kQK32) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < kQK32; j++) y[j] = static_cast<float>(q5_level(x[i].qs, x[i].qh, j) - 16) * d;
  }
}

void dequantize_row_q5_1(const BlockQ5_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK32; i++, y += kQK32) {
    const float d = fp16_to_fp32(x[i].d), m = fp16_to_fp32(x[i].m);
    for (int j = 0; j < kQK32; j++) y[j] = static_cast<float>(q5_level(x[i].qs, x[i].qh, j)) * d + m;
  }
}

}  // namespace kestrel

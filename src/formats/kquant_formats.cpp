#include "formats/kquant_formats.h"

#include "formats/fp16.h"

namespace kestrel {
namespace {

// Scales and mins of the two 32-weight halves of 64-weight chunk `is / 2`.
struct HalfScales {
  float d1, m1, d2, m2;
};
inline HalfScales half_scales(const uint8_t* scales, int is, float d, float dmin) {
  int sc, m;
  unpack_scale_min_k4(scales, is, sc, m);
  HalfScales h{d * static_cast<float>(sc), dmin * static_cast<float>(m), 0, 0};
  unpack_scale_min_k4(scales, is + 1, sc, m);
  h.d2 = d * static_cast<float>(sc);
  h.m2 = dmin * static_cast<float>(m);
  return h;
}

}  // namespace

void dequantize_row_q4_K(const BlockQ4_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; i++) {
    const uint8_t* q = x[i].qs;
    const float d = fp16_to_fp32(x[i].d), dmin = fp16_to_fp32(x[i].dmin);
    for (int j = 0, is = 0; j < kQK_K; j += 64, is += 2, q += 32) {
      const HalfScales h = half_scales(x[i].scales, is, d, dmin);
      for (int l = 0; l < 32; l++) *y++ = h.d1 * static_cast<float>(q[l] & 0xF) - h.m1;
      for (int l = 0; l < 32; l++) *y++ = h.d2 * static_cast<float>(q[l] >> 4) - h.m2;
    }
  }
}

void dequantize_row_q5_K(const BlockQ5_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; i++) {
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    const float d = fp16_to_fp32(x[i].d), dmin = fp16_to_fp32(x[i].dmin);
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0, is = 0; j < kQK_K; j += 64, is += 2, ql += 32) {
      const HalfScales h = half_scales(x[i].scales, is, d, dmin);
      for (int l = 0; l < 32; l++) *y++ = h.d1 * static_cast<float>((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - h.m1;
      for (int l = 0; l < 32; l++) *y++ = h.d2 * static_cast<float>((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - h.m2;
      u1 = static_cast<uint8_t>(u1 << 2);
      u2 = static_cast<uint8_t>(u2 << 2);
    }
  }
}

void dequantize_row_q6_K(const BlockQ6_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; i++) {
    const float d = fp16_to_fp32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int half = 0; half < 2; half++, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; l++) {
        const int is = l / 16;
        const int q1 = static_cast<int8_t>((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = static_cast<int8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = static_cast<int8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        // (d * scale) * q, in ggml's order
        y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

void dequantize_row_q2_K(const BlockQ2_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; i++) {
    const float d = fp16_to_fp32(x[i].d), dmin = fp16_to_fp32(x[i].dmin);
    for (int e = 0; e < kQK_K; e++) {
      const int h = e / 128, j = (e / 32) % 4, l = e % 32;
      const uint8_t sc = x[i].scales[8 * h + 2 * j + l / 16];
      const int q = (x[i].qs[32 * h + l] >> (2 * j)) & 3;
      // (d * scale) * q - (dmin * min), in ggml's order
      *y++ = d * static_cast<float>(sc & 0xF) * static_cast<float>(q) - dmin * static_cast<float>(sc >> 4);
    }
  }
}

void dequantize_row_q3_K(const BlockQ3_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; i++) {
    int8_t scales[16];
    unpack_scales_q3_K(x[i].scales, scales);
    const float d = fp16_to_fp32(x[i].d);
    for (int e = 0; e < kQK_K; e++) {
      const int h = e / 128, j = (e / 32) % 4, l = e % 32;
      const int low = (x[i].qs[32 * h + l] >> (2 * j)) & 3;
      const int q = low - ((x[i].hmask[l] >> (e / 32)) & 1 ? 0 : 4);
      *y++ = d * static_cast<float>(scales[8 * h + 2 * j + l / 16] - 32) * static_cast<float>(q);
    }
  }
}

}  // namespace kestrel

#include "formats/block_formats.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"
#include "formats/fp16.h"
#include "formats/fp8.h"
#include "formats/iq_formats.h"
#include "formats/kquant_formats.h"
#include "formats/nonlinear4_formats.h"
#include "formats/q4q5_formats.h"
#include "formats/scale_fit.h"

namespace kestrel {

void quantize_row_q8_0_ref(const float* x, BlockQ8_0* y, int64_t n, Rounding r) {
  const int64_t nb = n / kQK8_0;
  for (int64_t i = 0; i < nb; i++) {
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; j++) amax = std::max(amax, std::fabs(x[i * kQK8_0 + j]));
    const float d = amax / 127.0f;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK8_0; j++) {
      const float v = x[i * kQK8_0 + j] * id;
      y[i].qs[j] = static_cast<int8_t>(r == Rounding::HalfAwayFromZero ? std::roundf(v) : std::nearbyint(v));
    }
  }
}

void quantize_row_q4_0_ref(const float* x, BlockQ4_0* y, int64_t n) {
  const int64_t nb = n / kQK4_0;
  for (int64_t i = 0; i < nb; i++) {
    // The scale maps the element of largest magnitude (with its sign) to -8.
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQK4_0; j++) {
      const float v = x[i * kQK4_0 + j];
      if (amax < std::fabs(v)) { amax = std::fabs(v); max = v; }
    }
    const float d = max / -8.0f;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK4_0 / 2; j++) {
      const float x0 = x[i * kQK4_0 + j] * id;
      const float x1 = x[i * kQK4_0 + kQK4_0 / 2 + j] * id;
      const uint8_t xi0 = std::min<int8_t>(15, static_cast<int8_t>(x0 + 8.5f));
      const uint8_t xi1 = std::min<int8_t>(15, static_cast<int8_t>(x1 + 8.5f));
      y[i].qs[j] = static_cast<uint8_t>(xi0 | (xi1 << 4));
    }
  }
}

void dequantize_row_q8_0(const BlockQ8_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK8_0; i++) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < kQK8_0; j++) y[i * kQK8_0 + j] = x[i].qs[j] * d;
  }
}

void dequantize_row_q4_0(const BlockQ4_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_0; i++) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < kQK4_0 / 2; j++) {
      y[i * kQK4_0 + j] = ((x[i].qs[j] & 0x0F) - 8) * d;
      y[i * kQK4_0 + j + kQK4_0 / 2] = ((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void quantize_row_fp8(const float* x, BlockFp8* y, int64_t n) {
  for (int64_t i = 0; i < n / kQKFp8; i++, x += kQKFp8) {
    float amax = 0.0f;
    for (int j = 0; j < kQKFp8; j++) amax = std::max(amax, std::fabs(x[j]));
    y[i].d = fp32_to_fp16(amax / kFp8E4M3Max);
    const float d = fp16_to_fp32(y[i].d), id = d ? 1.0f / d : 0.0f;
    for (int j = 0; j < kQKFp8; j++) y[i].qs[j] = fp32_to_e4m3(x[j] * id);
  }
}

void dequantize_row_fp8(const BlockFp8* x, float* y, int64_t n) {
  const auto& table = e4m3_table();
  for (int64_t i = 0; i < n / kQKFp8; i++) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < kQKFp8; j++) y[i * kQKFp8 + j] = d * table[x[i].qs[j]];
  }
}

void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  if (is_iq_grid_type(type)) return dequantize_row_iq(type, src, dst, n);
  switch (type) {
    case GgmlType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case GgmlType::F16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; i++) dst[i] = fp16_to_fp32(s[i]);
      return;
    }
    case GgmlType::BF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_fp32(s[i]);
      return;
    }
    case GgmlType::Q8_0: dequantize_row_q8_0(static_cast<const BlockQ8_0*>(src), dst, n); return;
    case GgmlType::Q4_0: dequantize_row_q4_0(static_cast<const BlockQ4_0*>(src), dst, n); return;
    case GgmlType::Q4_K: dequantize_row_q4_K(static_cast<const BlockQ4_K*>(src), dst, n); return;
    case GgmlType::Q5_K: dequantize_row_q5_K(static_cast<const BlockQ5_K*>(src), dst, n); return;
    case GgmlType::Q6_K: dequantize_row_q6_K(static_cast<const BlockQ6_K*>(src), dst, n); return;
    case GgmlType::KESTREL_FP8_E4M3: dequantize_row_fp8(static_cast<const BlockFp8*>(src), dst, n); return;
    case GgmlType::Q4_1: dequantize_row_q4_1(static_cast<const BlockQ4_1*>(src), dst, n); return;
    case GgmlType::Q5_0: dequantize_row_q5_0(static_cast<const BlockQ5_0*>(src), dst, n); return;
    case GgmlType::Q5_1: dequantize_row_q5_1(static_cast<const BlockQ5_1*>(src), dst, n); return;
    case GgmlType::Q2_K: dequantize_row_q2_K(static_cast<const BlockQ2_K*>(src), dst, n); return;
    case GgmlType::Q3_K: dequantize_row_q3_K(static_cast<const BlockQ3_K*>(src), dst, n); return;
    case GgmlType::IQ4_NL: dequantize_row_iq4_nl(static_cast<const BlockIQ4_NL*>(src), dst, n); return;
    case GgmlType::IQ4_XS: dequantize_row_iq4_xs(static_cast<const BlockIQ4_XS*>(src), dst, n); return;
    case GgmlType::MXFP4: dequantize_row_mxfp4(static_cast<const BlockMXFP4*>(src), dst, n); return;
    default: throw Error(std::string("dequantize: tensor type ") + std::string(type_name(type)) + " is not supported yet");
  }
}

bool can_quantize_to(GgmlType type) {
  switch (type) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q8_0: case GgmlType::Q4_0:
    case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K: case GgmlType::KESTREL_FP8_E4M3:
    case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q2_K: case GgmlType::Q3_K:
    case GgmlType::IQ4_NL: case GgmlType::IQ4_XS: case GgmlType::MXFP4: return true;
    default: return is_iq_grid_type(type);
  }
}

// Q4_0 with an importance row: the weighted least-squares scale per block.
static void quantize_row_q4_0_weighted(const float* x, BlockQ4_0* y, int64_t n, const float* imp) {
  float w[kQK4_0];
  for (int64_t i = 0; i < n / kQK4_0; i++, x += kQK4_0, imp += kQK4_0) {
    importance_weights(x, imp, kQK4_0, kQK4_0, w);
    y[i].d = fp32_to_fp16(fit_scale_symmetric(x, w, kQK4_0, 8));
    const float d = fp16_to_fp32(y[i].d), id = d ? 1.0f / d : 0.0f;
    for (int j = 0; j < kQK4_0 / 2; j++) {
      const int l0 = std::clamp(static_cast<int>(std::lround(x[j] * id)), -8, 7) + 8;
      const int l1 = std::clamp(static_cast<int>(std::lround(x[j + 16] * id)), -8, 7) + 8;
      y[i].qs[j] = static_cast<uint8_t>(l0 | (l1 << 4));
    }
  }
}

bool uses_importance(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q2_K:
    case GgmlType::Q3_K: case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K: case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS: return true;
    default: return is_iq_grid_type(type);
  }
}

bool requires_importance(GgmlType type) {
  switch (type) {
    case GgmlType::IQ1_S: case GgmlType::IQ1_M: case GgmlType::IQ2_XXS: case GgmlType::IQ2_XS: case GgmlType::IQ2_S:
    case GgmlType::IQ3_XXS: return true;
    default: return false;
  }
}

void quantize_row(GgmlType type, const float* src, void* dst, int64_t n, const float* imp) {
  if (imp && !uses_importance(type)) imp = nullptr;  // Q8_0, MXFP4, FP8, floats: one rounding, nothing to weigh
  if (imp && type == GgmlType::Q4_0) return quantize_row_q4_0_weighted(src, static_cast<BlockQ4_0*>(dst), n, imp);
  if (is_iq_grid_type(type)) return quantize_row_iq(type, src, dst, n, imp);
  switch (type) {
    case GgmlType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case GgmlType::F16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; i++) d[i] = fp32_to_fp16(src[i]);
      return;
    }
    case GgmlType::BF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; i++) d[i] = fp32_to_bf16(src[i]);
      return;
    }
    case GgmlType::Q8_0: quantize_row_q8_0_ref(src, static_cast<BlockQ8_0*>(dst), n); return;
    case GgmlType::Q4_0: quantize_row_q4_0_ref(src, static_cast<BlockQ4_0*>(dst), n); return;
    case GgmlType::Q4_K: quantize_row_q4_K(src, static_cast<BlockQ4_K*>(dst), n, imp); return;
    case GgmlType::Q5_K: quantize_row_q5_K(src, static_cast<BlockQ5_K*>(dst), n, imp); return;
    case GgmlType::Q6_K: quantize_row_q6_K(src, static_cast<BlockQ6_K*>(dst), n, imp); return;
    case GgmlType::KESTREL_FP8_E4M3: quantize_row_fp8(src, static_cast<BlockFp8*>(dst), n); return;
    case GgmlType::Q4_1: quantize_row_q4_1(src, static_cast<BlockQ4_1*>(dst), n, imp); return;
    case GgmlType::Q5_0: quantize_row_q5_0(src, static_cast<BlockQ5_0*>(dst), n, imp); return;
    case GgmlType::Q5_1: quantize_row_q5_1(src, static_cast<BlockQ5_1*>(dst), n, imp); return;
    case GgmlType::Q2_K: quantize_row_q2_K(src, static_cast<BlockQ2_K*>(dst), n, imp); return;
    case GgmlType::Q3_K: quantize_row_q3_K(src, static_cast<BlockQ3_K*>(dst), n, imp); return;
    case GgmlType::IQ4_NL: quantize_row_iq4_nl(src, static_cast<BlockIQ4_NL*>(dst), n, imp); return;
    case GgmlType::IQ4_XS: quantize_row_iq4_xs(src, static_cast<BlockIQ4_XS*>(dst), n, imp); return;
    case GgmlType::MXFP4: quantize_row_mxfp4(src, static_cast<BlockMXFP4*>(dst), n); return;
    default: throw Error(std::string("quantize: tensor type ") + std::string(type_name(type)) + " cannot be written yet");
  }
}

}  // namespace kestrel

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

namespace {

// One row per format quantize_row writes and dequantize_row reads (the IQ grid formats have their own table,
// iq_formats.h): its two row functions, and whether the fit weighs an importance row.
struct FormatRow {
  GgmlType type;
  void (*dequantize)(const void* src, float* dst, int64_t n);
  void (*quantize)(const float* src, void* dst, int64_t n, const float* imp);
  bool importance;  // the fit weighs an importance row (else one rounding: nothing to weigh)
};

// A format's row functions over its block type, with or without an importance row.
template <class Block, void (*Dequantize)(const Block*, float*, int64_t)>
void dequantize_as(const void* src, float* dst, int64_t n) {
  Dequantize(static_cast<const Block*>(src), dst, n);
}
template <class Block, void (*Quantize)(const float*, Block*, int64_t, const float*)>
void quantize_as(const float* src, void* dst, int64_t n, const float* imp) {
  Quantize(src, static_cast<Block*>(dst), n, imp);
}

void dequantize_f32(const void* src, float* dst, int64_t n) { std::memcpy(dst, src, static_cast<size_t>(n) * 4); }
void quantize_f32(const float* src, void* dst, int64_t n, const float*) { std::memcpy(dst, src, static_cast<size_t>(n) * 4); }
void dequantize_f16(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; i++) dst[i] = fp16_to_fp32(s[i]);
}
void quantize_f16(const float* src, void* dst, int64_t n, const float*) {
  auto* d = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; i++) d[i] = fp32_to_fp16(src[i]);
}
void dequantize_bf16(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_fp32(s[i]);
}
void quantize_bf16(const float* src, void* dst, int64_t n, const float*) {
  auto* d = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; i++) d[i] = fp32_to_bf16(src[i]);
}
void quantize_q8_0(const float* src, void* dst, int64_t n, const float*) {
  quantize_row_q8_0_ref(src, static_cast<BlockQ8_0*>(dst), n);
}
// Q4_0: ggml's reference rounding, or with an importance row the weighted least-squares scale.
void quantize_q4_0(const float* src, void* dst, int64_t n, const float* imp) {
  if (imp) return quantize_row_q4_0_weighted(src, static_cast<BlockQ4_0*>(dst), n, imp);
  quantize_row_q4_0_ref(src, static_cast<BlockQ4_0*>(dst), n);
}
void quantize_fp8(const float* src, void* dst, int64_t n, const float*) {
  quantize_row_fp8(src, static_cast<BlockFp8*>(dst), n);
}
void quantize_mxfp4(const float* src, void* dst, int64_t n, const float*) {
  quantize_row_mxfp4(src, static_cast<BlockMXFP4*>(dst), n);
}

constexpr FormatRow kFormats[] = {
    {GgmlType::F32, dequantize_f32, quantize_f32, false},
    {GgmlType::F16, dequantize_f16, quantize_f16, false},
    {GgmlType::BF16, dequantize_bf16, quantize_bf16, false},
    {GgmlType::Q8_0, dequantize_as<BlockQ8_0, dequantize_row_q8_0>, quantize_q8_0, false},
    {GgmlType::Q4_0, dequantize_as<BlockQ4_0, dequantize_row_q4_0>, quantize_q4_0, true},
    {GgmlType::Q4_1, dequantize_as<BlockQ4_1, dequantize_row_q4_1>, quantize_as<BlockQ4_1, quantize_row_q4_1>, true},
    {GgmlType::Q5_0, dequantize_as<BlockQ5_0, dequantize_row_q5_0>, quantize_as<BlockQ5_0, quantize_row_q5_0>, true},
    {GgmlType::Q5_1, dequantize_as<BlockQ5_1, dequantize_row_q5_1>, quantize_as<BlockQ5_1, quantize_row_q5_1>, true},
    {GgmlType::Q2_K, dequantize_as<BlockQ2_K, dequantize_row_q2_K>, quantize_as<BlockQ2_K, quantize_row_q2_K>, true},
    {GgmlType::Q3_K, dequantize_as<BlockQ3_K, dequantize_row_q3_K>, quantize_as<BlockQ3_K, quantize_row_q3_K>, true},
    {GgmlType::Q4_K, dequantize_as<BlockQ4_K, dequantize_row_q4_K>, quantize_as<BlockQ4_K, quantize_row_q4_K>, true},
    {GgmlType::Q5_K, dequantize_as<BlockQ5_K, dequantize_row_q5_K>, quantize_as<BlockQ5_K, quantize_row_q5_K>, true},
    {GgmlType::Q6_K, dequantize_as<BlockQ6_K, dequantize_row_q6_K>, quantize_as<BlockQ6_K, quantize_row_q6_K>, true},
    {GgmlType::IQ4_NL, dequantize_as<BlockIQ4_NL, dequantize_row_iq4_nl>,
     quantize_as<BlockIQ4_NL, quantize_row_iq4_nl>, true},
    {GgmlType::IQ4_XS, dequantize_as<BlockIQ4_XS, dequantize_row_iq4_xs>,
     quantize_as<BlockIQ4_XS, quantize_row_iq4_xs>, true},
    {GgmlType::MXFP4, dequantize_as<BlockMXFP4, dequantize_row_mxfp4>, quantize_mxfp4, false},
    {GgmlType::KESTREL_FP8_E4M3, dequantize_as<BlockFp8, dequantize_row_fp8>, quantize_fp8, false},
};

const FormatRow* format_row(GgmlType t) {
  for (const FormatRow& r : kFormats)
    if (r.type == t) return &r;
  return nullptr;
}

}  // namespace

void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  if (is_iq_grid_type(type)) return dequantize_row_iq(type, src, dst, n);
  const FormatRow* r = format_row(type);
  if (!r) throw Error(std::string("dequantize: tensor type ") + std::string(type_name(type)) + " is not supported yet");
  r->dequantize(src, dst, n);
}

bool can_quantize_to(GgmlType type) { return is_iq_grid_type(type) || format_row(type) != nullptr; }

bool uses_importance(GgmlType type) {
  if (is_iq_grid_type(type)) return true;
  const FormatRow* r = format_row(type);
  return r && r->importance;
}

// The IQ grid formats whose fit cannot do without one (llama.cpp refuses them without an imatrix).
bool requires_importance(GgmlType type) {
  switch (type) {
    case GgmlType::IQ1_S: case GgmlType::IQ1_M: case GgmlType::IQ2_XXS: case GgmlType::IQ2_XS: case GgmlType::IQ2_S:
    case GgmlType::IQ3_XXS: return true;
    default: return false;
  }
}

void quantize_row(GgmlType type, const float* src, void* dst, int64_t n, const float* imp) {
  if (imp && !uses_importance(type)) imp = nullptr;  // Q8_0, MXFP4, FP8, floats: one rounding, nothing to weigh
  if (is_iq_grid_type(type)) return quantize_row_iq(type, src, dst, n, imp);
  const FormatRow* r = format_row(type);
  if (!r) throw Error(std::string("quantize: tensor type ") + std::string(type_name(type)) + " cannot be written yet");
  r->quantize(src, dst, n, imp);
}

}  // namespace kestrel

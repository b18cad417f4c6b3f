#include "kernels/isa_dispatch.h"
#include "kernels/kv_format.h"

#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"
#include "formats/fp16.h"
#include "formats/fp8.h"
#include "hw/cpu_features.h"

namespace kestrel {
namespace {

constexpr int kMaxGroup = 32;

int group_for(KvType t, int64_t granule) {
  if (t == KvType::F32 || t == KvType::F16 || t == KvType::BF16) return 1;
  int g = kMaxGroup;
  while (g > 1 && granule % g != 0) g /= 2;
  if (t == KvType::Q4 && g < 2) throw Error("KV type q4 needs an even head size");
  return g;
}

size_t group_bytes_for(KvType t, int g) {
  switch (t) {
    case KvType::F32:
      return 4;
    case KvType::F16:
    case KvType::BF16:
      return 2;
    case KvType::Q8_0:
    case KvType::FP8:
      return 2 + static_cast<size_t>(g);
    case KvType::Q4:
      return 4 + static_cast<size_t>(g) / 2;
  }
  return 4;
}

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline void store_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

}  // namespace

std::optional<KvType> kv_type_from_name(std::string_view name) {
  for (KvType t : {KvType::F32, KvType::F16, KvType::BF16, KvType::Q8_0, KvType::FP8, KvType::Q4})
    if (name == kv_type_name(t)) return t;
  return std::nullopt;
}

const char* kv_type_name(KvType t) {
  switch (t) {
    case KvType::F32:
      return "f32";
    case KvType::F16:
      return "f16";
    case KvType::BF16:
      return "bf16";
    case KvType::Q8_0:
      return "q8_0";
    case KvType::FP8:
      return "fp8";
    case KvType::Q4:
      return "q4";
  }
  return "?";
}

KvRowFormat::KvRowFormat(KvType type, int64_t granule) : KvRowFormat(type, granule, kv_dequant()) {}

KvRowFormat::KvRowFormat(KvType type, int64_t granule, const KvDequantKernels& k)
    : type_(type), group_(group_for(type, granule)), group_bytes_(group_bytes_for(type, group_)) {
  switch (type) {
    case KvType::F32:
      break;
    case KvType::F16:
      dequant_ = k.f16;
      break;
    case KvType::BF16:
      dequant_ = k.bf16;
      break;
    case KvType::Q8_0:
      dequant_ = k.q8_0;
      break;
    case KvType::FP8:
      dequant_ = k.fp8;
      break;
    case KvType::Q4:
      dequant_ = k.q4;
      break;
  }
}

void KvRowFormat::quantize(const float* x, void* dst, int64_t n) const {
  auto* out = static_cast<uint8_t*>(dst);
  switch (type_) {
    case KvType::F32:
      std::memcpy(out, x, static_cast<size_t>(n) * 4);
      return;
    case KvType::F16:
      for (int64_t i = 0; i < n; i++) store_u16(out + 2 * i, fp32_to_fp16(x[i]));
      return;
    case KvType::BF16:
      for (int64_t i = 0; i < n; i++) store_u16(out + 2 * i, fp32_to_bf16(x[i]));
      return;
    default:
      break;
  }
  const int g = group_;
  float rot[kMaxGroup];
  for (int64_t b = 0; b < n / g; b++, x += g, out += group_bytes_) {
    std::copy_n(x, g, rot);
    if (rotated()) walsh_hadamard(rot, g);
    float lo = rot[0], hi = rot[0], amax = 0;
    for (int i = 0; i < g; i++) {
      lo = std::min(lo, rot[i]);
      hi = std::max(hi, rot[i]);
      amax = std::max(amax, std::fabs(rot[i]));
    }
    const float* xr = rot;
    if (type_ == KvType::Q8_0) {
      const uint16_t dh = fp32_to_fp16(amax / 127.0f);
      const float d = fp16_to_fp32(dh), id = d ? 1 / d : 0;
      store_u16(out, dh);
      for (int i = 0; i < g; i++)
        out[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::clamp(std::nearbyint(xr[i] * id), -127.0f, 127.0f)));
    } else if (type_ == KvType::FP8) {
      const uint16_t dh = fp32_to_fp16(amax / kFp8E4M3Max);
      const float d = fp16_to_fp32(dh), id = d ? 1 / d : 0;
      store_u16(out, dh);
      for (int i = 0; i < g; i++) out[2 + i] = fp32_to_e4m3(xr[i] * id);
    } else {  // Q4
      const uint16_t dh = fp32_to_fp16((hi - lo) / 15.0f), mh = fp32_to_fp16(lo);
      const float d = fp16_to_fp32(dh), m = fp16_to_fp32(mh), id = d ? 1 / d : 0;
      store_u16(out, dh);
      store_u16(out + 2, mh);
      for (int i = 0; i < g; i += 2) {
        const int q0 = static_cast<int>(std::clamp(std::nearbyint((xr[i] - m) * id), 0.0f, 15.0f));
        const int q1 = static_cast<int>(std::clamp(std::nearbyint((xr[i + 1] - m) * id), 0.0f, 15.0f));
        out[4 + i / 2] = static_cast<uint8_t>(q0 | (q1 << 4));
      }
    }
  }
}

void KvRowFormat::dequantize(const void* row, int64_t first, float* y, int64_t n) const {
  const uint8_t* in = static_cast<const uint8_t*>(row) + bytes(first);
  if (type_ == KvType::F32) {
    std::memcpy(y, in, static_cast<size_t>(n) * 4);
    return;
  }
  dequant_(in, y, n, group_, group_bytes_);
}

namespace {

void dequant_f16(const uint8_t* in, float* y, int64_t n, int, size_t) {
  for (int64_t i = 0; i < n; i++) y[i] = fp16_to_fp32(load_u16(in + 2 * i));
}
void dequant_bf16(const uint8_t* in, float* y, int64_t n, int, size_t) {
  for (int64_t i = 0; i < n; i++) y[i] = bf16_to_fp32(load_u16(in + 2 * i));
}
void dequant_q8_0(const uint8_t* in, float* y, int64_t n, int g, size_t gb) {
  for (int64_t b = 0; b < n / g; b++, y += g, in += gb) {
    const float d = fp16_to_fp32(load_u16(in));
    for (int i = 0; i < g; i++) y[i] = d * static_cast<float>(static_cast<int8_t>(in[2 + i]));
    walsh_hadamard(y, g);
  }
}
void dequant_fp8(const uint8_t* in, float* y, int64_t n, int g, size_t gb) {
  const auto& fp8 = e4m3_table();
  for (int64_t b = 0; b < n / g; b++, y += g, in += gb) {
    const float d = fp16_to_fp32(load_u16(in));
    for (int i = 0; i < g; i++) y[i] = d * fp8[in[2 + i]];
  }
}
void dequant_q4(const uint8_t* in, float* y, int64_t n, int g, size_t gb) {
  for (int64_t b = 0; b < n / g; b++, y += g, in += gb) {
    const float d = fp16_to_fp32(load_u16(in)), m = fp16_to_fp32(load_u16(in + 2));
    for (int i = 0; i < g; i += 2) {
      const float lo = d * static_cast<float>(in[4 + i / 2] & 0xF), hi = d * static_cast<float>(in[4 + i / 2] >> 4);
      y[i] = lo + m;
      y[i + 1] = hi + m;
    }
    walsh_hadamard(y, g);
  }
}

}  // namespace

const KvDequantKernels& scalar_kv_dequant() {
  static const KvDequantKernels k{"scalar", dequant_f16, dequant_bf16, dequant_q8_0, dequant_fp8, dequant_q4};
  return k;
}

#ifndef KESTREL_HAVE_AVX2_KERNELS
const KvDequantKernels* avx2_kv_dequant() { return nullptr; }
#endif

const KvDequantKernels& kv_dequant() {
  static const KvDequantKernels& k = best_table(selected_isa(), scalar_kv_dequant(), avx2_kv_dequant());
  return k;
}

}  // namespace kestrel

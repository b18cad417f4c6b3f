#pragma once
// How a KV-cache row (one token's keys or values for one layer) is stored.
// Quantized types keep a scale per group of consecutive channels of the same
// token, so a token's row is final the moment it is written: blocks can be
// shared between sequences (prefix caching) and copied on write without any
// re-quantization, and attention dequantizes just the head it reads.
//
//   f32, f16, bf16: plain elements.
//   q8_0: int8 with an fp16 scale per group (x = d*q, d = max|x|/127).
//   fp8:  E4M3 with an fp16 scale per group (x = d*e4m3(q), d = max|x|/448).
//   q4:   4-bit levels with an fp16 scale and an fp16 minimum per group
//         (x = d*q + m, asymmetric: keys have a per-channel offset that a
//         symmetric 4-bit grid wastes half its levels on).
// The group is 32 channels, or the largest power of two dividing the model's
// head size when that is smaller (a group never straddles two heads).
//
// q8_0 and q4 groups are stored rotated by an orthonormal Walsh-Hadamard
// transform (undone on read): keys carry a few outlier channels that set a
// group's scale and crush the rest, and the rotation spreads them over the
// group. Measured on stories260K (KL divergence over eval/stories.txt, keys
// dominate: q4 on keys alone 0.275, on values alone 0.0011): q8_0 0.0022 ->
// 0.0008, q4 0.417 -> 0.275 with the rotation. fp8 is a float format whose
// error is relative to each value, and mixing small values with large ones
// hurts it (0.011 -> 0.032), so fp8 is stored unrotated. Keys and values can
// have different types (--kv-type-k / --kv-type-v); q8_0 keys with q4 values
// keep most of q4's saving at a small fraction of its error.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kestrel {

enum class KvType { F32, F16, BF16, Q8_0, FP8, Q4 };

// Dequantizes n elements (whole groups) of one stored type; group is the
// group size, group_bytes its stored size (unused by f16/bf16).
using KvDequantFn = void (*)(const uint8_t* in, float* y, int64_t n, int group, size_t group_bytes);
struct KvDequantKernels {
  const char* isa;
  KvDequantFn f16, bf16, q8_0, fp8, q4;
};
const KvDequantKernels& scalar_kv_dequant();
const KvDequantKernels* avx2_kv_dequant();  // nullptr when not compiled in
const KvDequantKernels& kv_dequant();       // the one for selected_isa()

std::optional<KvType> kv_type_from_name(std::string_view name);  // "f32", "f16", "bf16", "q8_0", "fp8", "q4"
const char* kv_type_name(KvType t);
inline constexpr const char* kKvTypeNames = "f32, f16, bf16, q8_0, fp8, q4";

class KvRowFormat {
 public:
  KvRowFormat() = default;
  // granule: every row and every piece attention reads is a multiple of it.
  KvRowFormat(KvType type, int64_t granule);
  // The same with a given kernel table (tests compare tables).
  KvRowFormat(KvType type, int64_t granule, const KvDequantKernels& kernels);

  KvType type() const { return type_; }
  int group() const { return group_; }
  // Bytes of n elements (n a multiple of group()); also the byte offset of element n.
  size_t bytes(int64_t n) const { return static_cast<size_t>(n / group_) * group_bytes_; }
  double bits_per_value() const { return 8.0 * static_cast<double>(group_bytes_) / group_; }
  bool rotated() const { return type_ == KvType::Q8_0 || type_ == KvType::Q4; }

  void quantize(const float* x, void* dst, int64_t n) const;
  // Elements [first, first + n) of a stored row into y; first and n multiples of group().
  void dequantize(const void* row, int64_t first, float* y, int64_t n) const;
  // The row's elements as floats: a pointer into the row itself for f32, else dequantized into scratch.
  const float* read(const void* row, int64_t first, float* scratch, int64_t n) const {
    if (type_ == KvType::F32) return static_cast<const float*>(row) + first;
    dequantize(row, first, scratch, n);
    return scratch;
  }

 private:
  KvType type_ = KvType::F32;
  int group_ = 1;
  size_t group_bytes_ = 4;
  KvDequantFn dequant_ = nullptr;  // the SIMD (or scalar) reader of type_
};

}  // namespace kestrel

#pragma once
// Row dots for the weight formats added after Q4_0/Q8_0 and Q4_K-Q6_K: the
// legacy Q4_1/Q5_0/Q5_1, the k-quants Q2_K/Q3_K, the table formats
// IQ4_NL/IQ4_XS/MXFP4. Each meets activations quantized to the format ggml
// pairs it with (its vec_dot_type), so integer products and float rounding
// follow llama.cpp's: Q8_0 for Q5_0/IQ4_NL/MXFP4, Q8_1 (Q8_0 plus the
// scaled block sum, which carries the minimum) for Q4_1/Q5_1, Q8_K for the
// 256-wide formats.
//
// One entry per weight type: a dot of T tokens against one row (T = the
// table's `tokens`, at most 16, for prefill: each block's weights are
// unpacked once for all T) and the same kernel for one token, so that a
// row's result does not depend on the batch it is in. The scalar table is
// the reference the AVX2 and AVX-512 VNNI tables are tested against.
#include <cstddef>
#include <cstdint>
#include <span>

#include "formats/ggml_types.h"
#include "hw/cpu_features.h"

namespace kestrel {

enum class ActFormat : uint8_t { Q8_0, Q8_1, Q8_K };

// out[t] = dot(row w, activations x[t]) over n elements.
using QRowDot = void (*)(const void* w, const void* const* x, int64_t n, float* out);

// x[t] points at activations in activation_format(type) (below).
struct QTypeDots {
  GgmlType type;
  QRowDot one;   // x[0] only
  QRowDot many;  // x[0 .. tokens)
};

struct QDotTable {
  const char* isa;
  int tokens;
  std::span<const QTypeDots> dots;
  // The entry for a weight type, or nullptr when this table has none.
  const QTypeDots* find(GgmlType t) const {
    for (const auto& d : dots)
      if (d.type == t) return &d;
    return nullptr;
  }
};

const QDotTable& scalar_qdots();
const QDotTable* avx2_qdots();        // nullptr when not compiled in
const QDotTable* avx512vnni_qdots();  // nullptr when not compiled in
// The best table an ISA level allows on this CPU (the one selection rule: matmul_kernels' table takes it too),
// and the one for selected_isa().
const QDotTable& qdots_for(IsaLevel isa);
const QDotTable& qdots();

// The activation format ggml pairs with a quantized weight type: Q8_K for
// the 256-wide types, Q8_1 for Q4_1/Q5_1, Q8_0 for the others.
ActFormat activation_format(GgmlType weight);

// Bytes of one row of n activations in a format, and the quantizer
// (ggml's run-time one: round half to even).
size_t activation_row_bytes(ActFormat f, int64_t n);
void quantize_activations(ActFormat f, const float* x, void* out, int64_t n);
const char* activation_format_name(ActFormat f);

}  // namespace kestrel

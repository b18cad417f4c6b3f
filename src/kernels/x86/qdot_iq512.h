#pragma once
// The IQ1-IQ3 row dots in 512-bit vectors (qdot_iq_avx512vnni.cpp): 64
// weights per step — the lattice entries fetched by one gather, the signs
// applied as a 64-bit mask that negates activations, one vpdpbusd — for the
// AVX-512 VNNI table of qdot.h. Same integer sums per block as the scalar
// reference, so the same results bit for bit.
#include <cstdint>

#include "formats/ggml_types.h"

namespace kestrel::iq512 {

// T = 1 or 4 tokens (qdot.h's QRowDot), for the seven IQ1-IQ3 types.
template <GgmlType kType, int T>
void dot(const void* w, const void* const* x, int64_t n, float* out);

}  // namespace kestrel::iq512

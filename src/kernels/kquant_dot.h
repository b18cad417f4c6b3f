#pragma once
// Row dots for the k-quants and FP8. As in ggml, k-quant rows meet
// activations quantized per 256 to Q8_K (int8 with a float scale and the sums
// of each 16), so the inner products are integer: unsigned weight levels
// times signed activations (vpdpbusd with AVX-512 VNNI, vpmaddubsw + vpmaddwd
// with AVX2), each sub-block's scale applied to its int32 sum, the minimums
// (Q4_K/Q5_K) and the offset of 32 (Q6_K) applied through the activation
// sums. FP8 rows meet float32 activations: each E4M3 byte becomes an fp16
// with the same bits shifted (value / 256), converted by F16C.
// The scalar table is the reference the SIMD tables are tested against.
#include <cstdint>

#include "formats/block_formats.h"
#include "formats/kquant_formats.h"
#include "hw/cpu_features.h"

namespace kestrel {

// ggml's block_q8_K: x = d * qs, bsums[j] = sum of qs[16j .. 16j + 15].
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};
static_assert(sizeof(BlockQ8_K) == 292);

// ggml's reference: the largest-magnitude element maps to -127. Runs the
// AVX-512 version (the same bytes) when the CPU has it.
void quantize_row_q8_K(const float* x, BlockQ8_K* y, int64_t n);
void quantize_row_q8_K_scalar(const float* x, BlockQ8_K* y, int64_t n);
void quantize_row_q8_K_avx512(const float* x, BlockQ8_K* y, int64_t n);  // requires AVX-512 BW
void quantize_row_q8_K_avx2(const float* x, BlockQ8_K* y, int64_t n);    // requires AVX2

struct KQuantDots {
  const char* isa;
  float (*q4_K)(const BlockQ4_K* w, const BlockQ8_K* x, int64_t n);
  float (*q5_K)(const BlockQ5_K* w, const BlockQ8_K* x, int64_t n);
  float (*q6_K)(const BlockQ6_K* w, const BlockQ8_K* x, int64_t n);
  float (*fp8)(const BlockFp8* w, const float* x, int64_t n);
  // `tokens` (at most 16) tokens against one row (prefill): out[t] = dot(w, x[t]), equal
  // to the one-token dots (a row's result must not depend on its batch).
  int tokens;
  void (*q4_K_xt)(const BlockQ4_K* w, const BlockQ8_K* const* x, int64_t n, float* out);
  void (*q5_K_xt)(const BlockQ5_K* w, const BlockQ8_K* const* x, int64_t n, float* out);
  void (*q6_K_xt)(const BlockQ6_K* w, const BlockQ8_K* const* x, int64_t n, float* out);
};

// A table's one-token entry from a many-token kernel instantiated for one
// token: the same arithmetic, so a row's result does not depend on its batch.
template <typename Block, void (*kKernel)(const Block*, const BlockQ8_K* const*, int64_t, float*)>
float one_token(const Block* w, const BlockQ8_K* x, int64_t n) {
  float out;
  kKernel(w, &x, n, &out);
  return out;
}

const KQuantDots& scalar_kquant_dots();
const KQuantDots* avx2_kquant_dots();        // nullptr when not compiled in
const KQuantDots* avx512vnni_kquant_dots();  // nullptr when not compiled in
// The best table an ISA level allows on this CPU (the one selection rule: matmul_kernels' table takes it too),
// and the one for selected_isa().
const KQuantDots& kquant_dots_for(IsaLevel isa);
const KQuantDots& kquant_dots();

}  // namespace kestrel

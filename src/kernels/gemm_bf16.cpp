#include "kernels/isa_dispatch.h"
#include "kernels/gemm_bf16.h"

#include "hw/cpu_features.h"

namespace kestrel {

#ifndef KESTREL_HAVE_AVX2_KERNELS
void convert_to_bf16(const float*, uint16_t*, int64_t) {}
void gemm_bf16(const uint8_t*, size_t, int64_t, int64_t, int64_t, const uint16_t*, int64_t, float*, int64_t, int64_t) {}
#endif

bool gemm_bf16_available() {
  static const bool runs = isa_runs(IsaNeed::Avx512Bf16);
  return runs;
}

}  // namespace kestrel

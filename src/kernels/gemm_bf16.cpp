#include "kernels/gemm_bf16.h"

#include "hw/cpu_features.h"

namespace kestrel {

#ifndef KESTREL_HAVE_AVX2_KERNELS
void convert_to_bf16(const float*, uint16_t*, int64_t) {}
void gemm_bf16(const uint8_t*, size_t, int64_t, int64_t, int64_t, const uint16_t*, int64_t, float*, int64_t, int64_t) {}
#endif

bool gemm_bf16_available() {
#ifdef KESTREL_HAVE_AVX2_KERNELS
  const auto& f = cpu_features();
  return selected_isa() == IsaLevel::Avx512 && f.avx512bf16 && f.avx512bw;
#else
  return false;
#endif
}

}  // namespace kestrel

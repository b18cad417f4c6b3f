#include "kernels/isa_dispatch.h"
#include "kernels/gemm_q8.h"

#include "hw/cpu_features.h"

namespace kestrel {

#ifndef KESTREL_HAVE_AVX2_KERNELS
void compute_lane_sums(const BlockQ8_0*, int64_t, int32_t*) {}
void gemm_q8_vnni(GgmlType, const uint8_t*, size_t, int64_t, int64_t, const QuantizedActivations&, float*, int64_t, int64_t) {}
#endif

bool gemm_q8_available() {
  static const bool runs = isa_runs(IsaNeed::Avx512Vnni);
  return runs;
}

}  // namespace kestrel

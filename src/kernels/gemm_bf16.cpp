#include "kernels/gemm_bf16.h"

#include "kernels/isa_dispatch.h"

namespace kestrel {

const Bf16Tiles& avx512bf16_tiles();  // kernels/x86/gemm_bf16_avx512bf16.cpp

const Bf16Tiles* bf16_tiles(IsaLevel isa) {
  return single_table<Bf16Tiles>(IsaNeed::Avx512Bf16, isa, KESTREL_SIMD_TABLE(avx512bf16_tiles));
}

}  // namespace kestrel

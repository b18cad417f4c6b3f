#include "kernels/gemm_float.h"

#include "kernels/isa_dispatch.h"

namespace kestrel {

const FloatTiles& avx512_float_tiles();  // kernels/x86/gemm_float_avx512.cpp
const FloatTiles& avx2_float_tiles();    // kernels/x86/gemm_float_avx2.cpp

const FloatTiles* float_tiles(IsaLevel isa) {
  if (const auto* t = single_table<FloatTiles>(IsaNeed::Avx512, isa, KESTREL_SIMD_TABLE(avx512_float_tiles))) return t;
  return single_table<FloatTiles>(IsaNeed::Avx2, isa, KESTREL_SIMD_TABLE(avx2_float_tiles));
}

}  // namespace kestrel

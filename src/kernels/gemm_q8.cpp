#include "kernels/gemm_q8.h"

#include "kernels/isa_dispatch.h"

namespace kestrel {

const Int8Tiles& avx512vnni_int8_tiles();  // kernels/x86/gemm_q8_avx512vnni.cpp

const Int8Tiles* int8_tiles(IsaLevel isa) {
  return single_table<Int8Tiles>(IsaNeed::Avx512Vnni, isa, KESTREL_SIMD_TABLE(avx512vnni_int8_tiles));
}

}  // namespace kestrel

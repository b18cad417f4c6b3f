// The repacked kernels (packed_q8.h) for AVX2 + FMA + F16C, on the same
// layout as the AVX-512 VNNI ones (vpmaddubsw + vpmaddwd; packed_q8_256.h has
// the body and how each kind stays clear of int16 saturation); called only
// when the CPU has them.
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "formats/nonlinear4_formats.h"
#include "kernels/packed_q8.h"

#define KESTREL_PACKED_DPBUSD 0

namespace kestrel {
namespace {
#include "kernels/x86/packed_q8_256.h"  // NOLINT(bugprone-suspicious-include): one ISA per TU
}  // namespace

const PackedGemm& avx2_packed_gemm() {
  static const PackedGemm t{
      "avx2", packed_gemm_256,
      "vpmaddubsw + vpmaddwd, one block per lane; 8 rows x 4 tokens for batches, 16 rows x 1 token for decode",
      "vpmaddubsw, sub-block scales in vpmaddwd; 8 rows x 4 tokens for batches, 16 rows x 1 token for decode"};
  return t;
}

}  // namespace kestrel

// The repacked kernels (packed_q8.h) for AVX-VNNI (Alder Lake and later,
// Zen 5): the 256-bit body of packed_q8_256.h with the VEX-encoded vpdpbusd
// for the block formats; called only when the CPU reports avx_vnni.
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "formats/nonlinear4_formats.h"
#include "kernels/packed_q8.h"

#define KESTREL_PACKED_DPBUSD 1
#define KESTREL_DPBUSD256 _mm256_dpbusd_avx_epi32

namespace kestrel {
namespace {
#include "kernels/x86/packed_q8_256.h"  // NOLINT(bugprone-suspicious-include): one ISA per TU
}  // namespace

const PackedGemm& avxvnni_packed_gemm() {
  static const PackedGemm t{
      "avx-vnni", packed_gemm_256,
      "vpdpbusd (VEX), one block per lane; 8 rows x 4 tokens for batches, 16 rows x 1 token for decode",
      "vpmaddubsw, sub-block scales in vpmaddwd; 8 rows x 4 tokens for batches, 16 rows x 1 token for decode"};
  return t;
}

}  // namespace kestrel

// The AMX kernels of the packed weights on the tile unit itself (packed_q8_amx.h):
// compiled with AMX-TILE/INT8 and AVX-512 VNNI, called only where amx_state()
// says the tiles are usable (IsaLevel::Amx). Not run on the machines this was
// written on (no AMX): the same body runs on the scalar tile model in the tests
// (packed_q8_amx_model_avx512vnni.cpp).
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "formats/nonlinear4_formats.h"
#include "hw/amx_tiles.h"
#include "kernels/packed_q8.h"

namespace kestrel {
namespace {

#include "kernels/x86/packed_q8_512.h"  // NOLINT(bugprone-suspicious-include): in this namespace

// The hardware's tile instructions. GCC's intrinsics paste the tile number into the assembly text, so it
// must be a literal: the tiles the body uses (packed_q8_amx.h: 0-5), spelled out.
#define KESTREL_TILE_CASES(T, op) \
  if constexpr ((T) == 0) op(0);  \
  else if constexpr ((T) == 1) op(1); \
  else if constexpr ((T) == 2) op(2); \
  else if constexpr ((T) == 3) op(3); \
  else if constexpr ((T) == 4) op(4); \
  else if constexpr ((T) == 5) op(5); \
  else static_assert((T) < 6, "tiles 0-5 only")
struct HwTiles {
  static void configure(const TileConfig& c) { _tile_loadconfig(&c); }
  static void release() { _tile_release(); }
  template <int T>
  static void load(const void* p, size_t stride) {
#define KESTREL_OP(n) _tile_loadd(n, p, stride)
    KESTREL_TILE_CASES(T, KESTREL_OP);
#undef KESTREL_OP
  }
  template <int T>
  static void store(void* p, size_t stride) {
#define KESTREL_OP(n) _tile_stored(n, p, stride)
    KESTREL_TILE_CASES(T, KESTREL_OP);
#undef KESTREL_OP
  }
  template <int T>
  static void zero() {
#define KESTREL_OP(n) _tile_zero(n)
    KESTREL_TILE_CASES(T, KESTREL_OP);
#undef KESTREL_OP
  }
  template <int C, int A, int B>
  static void dpbsud() {
    static_assert((C == 4 && A == 0 && B == 1) || (C == 5 && A == 2 && B == 3), "the body's two products only");
    if constexpr (C == 4) _tile_dpbsud(4, 0, 1);
    else _tile_dpbsud(5, 2, 3);
  }
};
#undef KESTREL_TILE_CASES

#include "kernels/x86/packed_q8_amx.h"  // NOLINT(bugprone-suspicious-include): in this namespace

}  // namespace

const PackedGemm& amx_packed_gemm() {
  static const PackedGemm t{"amx", amx_packed_gemm_for<HwTiles>,
                           "tdpbsud 8 tokens x 16 rows x 32 per block (weights unpacked once per block for the chunk), "
                           "scales in avx512",
                           "tdpbsud per sub-block (K 16 or 32), integer scales and minimums in avx512 vnni"};
  return t;
}

}  // namespace kestrel

// The AMX kernels of the packed weights (packed_q8_amx.h) on the scalar model
// of the tile instructions (amx_tiles.h): what an AMX CPU runs, run here bit
// for bit (tests; far too slow to serve). Compiled with AVX-512 VNNI (the
// unpacking and scaling the body does around the tile instructions).
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
#include "kernels/x86/packed_q8_amx.h"  // NOLINT(bugprone-suspicious-include): in this namespace

}  // namespace

const PackedGemm& amx_model_packed_gemm() {
  static const PackedGemm t{ModelTiles::kName, amx_packed_gemm_for<ModelTiles>, "", ""};
  return t;
}

}  // namespace kestrel

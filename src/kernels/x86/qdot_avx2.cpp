// The qdot.h table for AVX2 + FMA + F16C (vpmaddubsw + vpmaddwd); called only when the CPU has it.
#include <immintrin.h>

#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "formats/block_formats.h"
#include "formats/iq_formats.h"
#include "formats/iq_grids.h"
#include "formats/kquant_formats.h"
#include "formats/nonlinear4_formats.h"
#include "formats/q4q5_formats.h"
#include "kernels/kquant_dot.h"
#include "kernels/qdot.h"

#define KESTREL_QDOT_VNNI 0

namespace kestrel {
namespace {
#include "kernels/x86/qdot_simd.h"  // NOLINT(bugprone-suspicious-include): one ISA per TU

constexpr int kTokens = 4;
constexpr auto kDots = simd_qdot_entries<kTokens>();
}  // namespace

const QDotTable* avx2_qdots() {
  static const QDotTable t{"avx2", kTokens, kDots};
  return &t;
}

}  // namespace kestrel

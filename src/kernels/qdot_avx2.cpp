// The qdot.h table for AVX2 + FMA + F16C (vpmaddubsw + vpmaddwd); called only when the CPU has it.
#include <immintrin.h>

#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/block_formats.h"
#include "core/iq_formats.h"
#include "core/iq_grids.h"
#include "core/kquant_formats.h"
#include "core/nonlinear4_formats.h"
#include "core/q4q5_formats.h"
#include "kernels/kquant_dot.h"
#include "kernels/qdot.h"

#define KESTREL_QDOT_VNNI 0

namespace kestrel {
namespace {
#include "kernels/qdot_simd.h"  // NOLINT(bugprone-suspicious-include): one ISA per TU

constexpr int kTokens = 4;
constexpr auto kDots = simd_qdot_entries<kTokens>();
}  // namespace

const QDotTable* avx2_qdots() {
  static const QDotTable t{"avx2", kTokens, kDots};
  return &t;
}

}  // namespace kestrel

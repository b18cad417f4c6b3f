#pragma once
// The one way a kernel family picks its version. Each family has a scalar
// table (the reference) and, when built with the SIMD files
// (KESTREL_HAVE_AVX2_KERNELS), per-ISA tables; best_table() takes the best
// one that selected_isa() allows (KESTREL_ISA lowers it) and the CPU runs,
// and the family's accessor keeps that choice in a function-local static:
// chosen once, and the name `kestrel hw` reports (the table's isa field) is
// read from the table that runs. Kernels with a single SIMD version ask
// isa_runs() instead.
#include <type_traits>

#include "hw/cpu_features.h"

namespace kestrel {

// Capabilities a single-version SIMD kernel needs.
enum class IsaNeed {
  Avx2,        // AVX2 + FMA + F16C
  AvxVnni,     // ...and AVX-VNNI (the VEX vpdpbusd)
  Avx512,      // AVX-512 F/BW/DQ/VL
  Avx512Vnni,  // ...and VNNI
  Avx512Bf16,  // ...and BF16
  Amx,         // AVX-512 VNNI and the tile unit (AMX-TILE/INT8, usable: amx_state())
};

// Whether the ISA level (the selected one unless given: benchmarks compare
// levels) allows it and the CPU has it (false in a build without the SIMD files).
inline bool isa_runs(IsaNeed need, IsaLevel isa = selected_isa()) {
#ifdef KESTREL_HAVE_AVX2_KERNELS
  const auto& f = cpu_features();
  const bool avx2 = isa != IsaLevel::Scalar && f.avx2 && f.fma && f.f16c;
  const bool avx512 = isa >= IsaLevel::Avx512 && f.avx512f && f.avx512bw && f.avx512dq && f.avx512vl;
  switch (need) {
    case IsaNeed::Avx2: return avx2;
    case IsaNeed::AvxVnni: return avx2 && f.avxvnni;
    case IsaNeed::Avx512: return avx512;
    case IsaNeed::Avx512Vnni: return avx512 && f.avx512vnni;
    case IsaNeed::Avx512Bf16: return avx512 && f.avx512bf16;
    case IsaNeed::Amx: return isa == IsaLevel::Amx && avx512 && f.avx512vnni && amx_state().usable;
  }
#endif
  (void)need;
  (void)isa;
  return false;
}

// A kernel with one SIMD version is a table too: KESTREL_SIMD_TABLE(accessor)
// is the accessor's table in a build with the SIMD files (null without: the
// accessor is then neither defined nor called), and single_table() keeps it
// where the CPU runs `need` at this ISA level — null otherwise, never a stub.
// (Callers name the table type: a build without the SIMD files passes nullptr.)
#ifdef KESTREL_HAVE_AVX2_KERNELS
#define KESTREL_SIMD_TABLE(accessor) (&(accessor)())
#else
#define KESTREL_SIMD_TABLE(accessor) nullptr
#endif
template <class Table>
const Table* single_table(IsaNeed need, IsaLevel isa, const Table* table) {
  return table && isa_runs(need, isa) ? table : nullptr;
}

// The best of a family's tables (null: not compiled in) for this CPU at an ISA level.
template <class Table>
const Table& best_table(IsaLevel isa, const Table& scalar, std::type_identity_t<const Table*> avx2,
                        std::type_identity_t<const Table*> avx512 = nullptr,
                        std::type_identity_t<const Table*> avx512vnni = nullptr) {
  if (avx512vnni && isa_runs(IsaNeed::Avx512Vnni, isa)) return *avx512vnni;
  if (avx512 && isa_runs(IsaNeed::Avx512, isa)) return *avx512;
  if (avx2 && isa_runs(IsaNeed::Avx2, isa)) return *avx2;
  return scalar;
}

}  // namespace kestrel

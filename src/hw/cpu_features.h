#pragma once
// What the CPU can do, probed once, and which kernel family Kestrel will use.
// KESTREL_ISA=scalar|avx2|avx512|amx forces a family (never one the CPU lacks).
#include <string>

namespace kestrel {

struct CpuFeatures {
  bool sse42 = false, avx = false, avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512dq = false, avx512vl = false, avx512vnni = false, avx512bf16 = false, avxvnni = false;
  // The AMX matrix unit (cpuid leaf 7) and AVX512-FP16; xcr0: what the OS saves (bits 17-18: the tile state).
  bool amx_tile = false, amx_int8 = false, amx_bf16 = false, avx512fp16 = false;
  unsigned long long xcr0 = 0;
  std::string brand;
};

// Whether tile instructions may run in this process: the CPU has AMX-TILE and AMX-INT8, the OS enables the
// tile state in XCR0, and Linux granted the tile data permission (arch_prctl ARCH_REQ_XCOMP_PERM, asked once:
// Linux grants it per process). `detail` says which step failed, or that it is usable.
struct AmxState {
  bool present = false, usable = false;
  std::string detail;
};
const AmxState& amx_state();
// The decision itself, for tests: the features, XCR0, and the permission request's result (0, or the errno).
AmxState amx_state_from(const CpuFeatures& f, int permission_errno);

// Amx: the AVX-512 level plus the tile unit's kernels (AMX-TILE/INT8 usable: amx_state()).
enum class IsaLevel { Scalar, Avx2, Avx512, Amx };
const char* isa_name(IsaLevel isa);

const CpuFeatures& cpu_features();
// The best level this CPU (and build) supports.
IsaLevel best_isa();
// The best level this CPU supports, lowered by KESTREL_ISA when set.
// Throws if KESTREL_ISA names an unknown level or one the CPU cannot run.
IsaLevel selected_isa();

}  // namespace kestrel

#pragma once
// What the CPU can do, probed once, and which kernel family Kestrel will use.
// KESTREL_ISA=scalar|avx2|avx512 forces a family (never one the CPU lacks).
#include <string>

namespace kestrel {

struct CpuFeatures {
  bool sse42 = false, avx = false, avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512dq = false, avx512vl = false, avx512vnni = false, avx512bf16 = false, avxvnni = false;
  std::string brand;
};

enum class IsaLevel { Scalar, Avx2, Avx512 };
const char* isa_name(IsaLevel isa);

const CpuFeatures& cpu_features();
// The best level this CPU supports, lowered by KESTREL_ISA when set.
// Throws if KESTREL_ISA names an unknown level or one the CPU cannot run.
IsaLevel selected_isa();

}  // namespace kestrel

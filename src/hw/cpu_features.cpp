#include "hw/cpu_features.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "core/error.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#define KESTREL_X86 1
#endif

namespace kestrel {

const char* isa_name(IsaLevel isa) {
  switch (isa) {
    case IsaLevel::Scalar: return "scalar";
    case IsaLevel::Avx2: return "avx2";
    case IsaLevel::Avx512: return "avx512";
    case IsaLevel::Amx: return "amx";
  }
  return "?";
}

static CpuFeatures probe_cpu() {
  CpuFeatures f;
#ifdef KESTREL_X86
  __builtin_cpu_init();
  f.sse42 = __builtin_cpu_supports("sse4.2");
  f.avx = __builtin_cpu_supports("avx");
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512vnni = __builtin_cpu_supports("avx512vnni");
  unsigned a, b, c, d;
  if (__get_cpuid(1, &a, &b, &c, &d)) f.f16c = (c >> 29) & 1;
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) {
    f.avxvnni = (a >> 4) & 1;
    f.avx512bf16 = (a >> 5) & 1;
  }
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.amx_bf16 = (d >> 22) & 1;
    f.avx512fp16 = (d >> 23) & 1;
    f.amx_tile = (d >> 24) & 1;
    f.amx_int8 = (d >> 25) & 1;
  }
  // XGETBV(0) where the OS set CR4.OSXSAVE (cpuid 1 ecx bit 27).
  if (__get_cpuid(1, &a, &b, &c, &d) && ((c >> 27) & 1)) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    f.xcr0 = (static_cast<unsigned long long>(hi) << 32) | lo;
  }
  char brand[49] = {};
  unsigned regs[12];
  if (__get_cpuid(0x80000000, &a, &b, &c, &d) && a >= 0x80000004) {
    for (unsigned i = 0; i < 3; i++) __get_cpuid(0x80000002 + i, &regs[i * 4], &regs[i * 4 + 1], &regs[i * 4 + 2], &regs[i * 4 + 3]);
    std::memcpy(brand, regs, 48);
    f.brand = brand;
    while (!f.brand.empty() && f.brand.back() == ' ') f.brand.pop_back();
  }
#endif
  return f;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = probe_cpu();
  return f;
}

AmxState amx_state_from(const CpuFeatures& f, int permission_errno) {
  AmxState s;
  s.present = f.amx_tile && f.amx_int8;
  if (!s.present) {
    s.detail = "not on this CPU";
    return s;
  }
  constexpr unsigned long long kTileState = (1ull << 17) | (1ull << 18);  // XTILECFG, XTILEDATA
  if ((f.xcr0 & kTileState) != kTileState) {
    s.detail = fmt::format("on the CPU, but the OS does not enable the tile state (XCR0 {:#x})", f.xcr0);
  } else if (permission_errno != 0) {
    s.detail = fmt::format("on the CPU, but Linux refused the tile data permission ({})", std::strerror(permission_errno));
  } else {
    s.usable = true;
    s.detail = "usable (tile data permission granted)";
  }
  return s;
}

const AmxState& amx_state() {
  static const AmxState s = [] {
    const CpuFeatures& f = cpu_features();
    int err = ENOSYS;
#if defined(__linux__) && defined(KESTREL_X86)
    if (f.amx_tile && f.amx_int8) {
      constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
      err = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0 ? 0 : errno;
    }
#endif
    return amx_state_from(f, err);
  }();
  return s;
}

IsaLevel best_isa() {
  IsaLevel best = IsaLevel::Scalar;
#ifdef KESTREL_HAVE_AVX2_KERNELS
  const auto& f = cpu_features();
  if (f.avx2 && f.fma && f.f16c) best = IsaLevel::Avx2;
  if (best == IsaLevel::Avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq) best = IsaLevel::Avx512;
  // The tile kernels read the same packed weights as the AVX-512 VNNI ones and fall back to them for small
  // batches: AMX-INT8 with the OS's and Linux's consent, on top of AVX-512 VNNI.
  if (best == IsaLevel::Avx512 && f.avx512vnni && amx_state().usable) best = IsaLevel::Amx;
#endif
  return best;
}

IsaLevel selected_isa() {
  const IsaLevel best = best_isa();
  const char* env = std::getenv("KESTREL_ISA");
  if (!env || !*env) return best;
  const std::string want = env;
  IsaLevel forced;
  if (want == "scalar") forced = IsaLevel::Scalar;
  else if (want == "avx2") forced = IsaLevel::Avx2;
  else if (want == "avx512") forced = IsaLevel::Avx512;
  else if (want == "amx") forced = IsaLevel::Amx;
  else throw Error("KESTREL_ISA='" + want + "' is not one of scalar, avx2, avx512, amx");
  if (static_cast<int>(forced) > static_cast<int>(best)) {
    std::string why;
    if (forced == IsaLevel::Amx) why = " (AMX " + amx_state().detail + ")";
    throw Error("KESTREL_ISA=" + want + " requested, but this CPU/build supports at most " + isa_name(best) + why);
  }
  return forced;
}

}  // namespace kestrel

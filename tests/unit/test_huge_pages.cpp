// Huge-page memory for weights: buffers of 2 MiB or more start on a 2 MiB
// boundary (so the kernel can back them with huge pages whatever their
// length), and the arena packs many buffers end to end without overlap,
// keeping each chunk alive for as long as an allocation from it is.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "core/huge_page_arena.h"
#include "core/huge_page_buffer.h"

namespace kestrel {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

uintptr_t addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

bool all_zero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i]) return false;
  return true;
}

// kB of AnonHugePages in the mapping that contains p (from /proc/self/smaps).
long huge_kb_of_mapping(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = addr(p) >= lo && addr(p) < hi;
      continue;
    }
    if (inside && line.rfind("AnonHugePages:", 0) == 0) return std::stol(line.substr(14));
  }
  return -1;
}

bool thp_allowed() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string s;
  std::getline(f, s);
  return !s.empty() && s.find("[never]") == std::string::npos;
}

TEST(HugePageBuffer, LargeBuffersStartOnA2MiBBoundaryAndAreZeroAndWritable) {
  for (size_t bytes : {2 * kMiB, 2 * kMiB + 4096 * 3 + 100, 5 * kMiB + 12345}) {
    HugePageBuffer b(bytes, "test");
    EXPECT_EQ(addr(b.data()) % (2 * kMiB), 0u) << bytes;
    auto* p = static_cast<uint8_t*>(b.data());
    EXPECT_TRUE(all_zero(p, bytes));
    std::memset(p, 0xAB, bytes);  // every byte of the requested length is mapped
    EXPECT_EQ(p[bytes - 1], 0xAB);
  }
  HugePageBuffer small(100, "test");
  EXPECT_EQ(addr(small.data()) % 64, 0u);
}

TEST(HugePageBuffer, IsBackedByHugePagesWhereTheKernelAllowsThem) {
  if (!thp_allowed()) GTEST_SKIP() << "transparent huge pages are disabled on this machine";
  // 6.2 MiB: not a multiple of 2 MiB, which Linux alone would not align.
  HugePageBuffer b(6 * kMiB + 200 * 1024, "test");
  std::memset(b.data(), 1, b.size());
  EXPECT_GE(huge_kb_of_mapping(b.data()), 2048);
}

TEST(HugePageArena, AllocationsAreAlignedDisjointAndOutliveTheArena) {
  HugePageArena::Allocation kept;
  {
    HugePageArena arena(4 * kMiB);
    auto a = arena.allocate(100, "a");
    auto b = arena.allocate(3000, "b");
    auto c = arena.allocate(9 * kMiB, "c");  // larger than a chunk: a chunk of its own
    auto d = arena.allocate(64, "d");
    for (const auto* x : {&a, &b, &c, &d}) {
      EXPECT_EQ(addr(x->data) % 64, 0u);
      ASSERT_NE(x->owner, nullptr);
    }
    EXPECT_EQ(b.data, a.data + 128);  // end to end, 64-byte aligned
    EXPECT_EQ(a.owner, b.owner);
    EXPECT_NE(c.owner, a.owner);
    EXPECT_EQ(addr(c.data) % (2 * kMiB), 0u);
    EXPECT_TRUE(all_zero(c.data, 9 * kMiB));
    std::memset(a.data, 1, 100);
    std::memset(b.data, 2, 3000);
    std::memset(c.data, 3, 9 * kMiB);
    std::memset(d.data, 4, 64);
    EXPECT_EQ(a.data[99], 1);  // b did not overwrite a
    EXPECT_EQ(b.data[2999], 2);
    kept = b;
  }
  // The arena is gone; the chunk b came from is still mapped and intact.
  EXPECT_EQ(kept.data[0], 2);
  EXPECT_EQ(kept.data[2999], 2);
}

}  // namespace
}  // namespace kestrel

#pragma once
// Anonymous memory backed by transparent huge pages where the kernel allows:
// weights that stream at full memory bandwidth suffer fewer TLB misses and
// prefetch stops at 4 KiB page boundaries on 2 MiB pages.
#include <cstddef>
#include <string>

namespace kestrel {

// A transparent huge page on x86-64 (2 MiB): what buffers are aligned to and arenas' chunks round up to.
inline constexpr size_t kHugePage = size_t{2} << 20;

// mmap'd anonymous, zero-filled, page-aligned (so 64-byte aligned) and
// advised MADV_HUGEPAGE. Throws Error naming `what` when it cannot allocate.
void* map_huge_pages(size_t bytes, const std::string& what);

class HugePageBuffer {
 public:
  HugePageBuffer() = default;
  HugePageBuffer(size_t bytes, const std::string& what);
  HugePageBuffer(HugePageBuffer&& o) noexcept;
  HugePageBuffer& operator=(HugePageBuffer&& o) noexcept;
  HugePageBuffer(const HugePageBuffer&) = delete;
  ~HugePageBuffer();

  void* data() { return data_; }
  const void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kestrel

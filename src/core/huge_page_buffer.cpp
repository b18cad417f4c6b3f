#include "core/huge_page_buffer.h"

#include <sys/mman.h>

#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace kestrel {

void* map_huge_pages(size_t bytes, const std::string& what) {
  // Linux (since 6.12) aligns an anonymous mapping to 2 MiB only when its
  // length is a multiple of 2 MiB; a weight of 2.4 MiB at a 4 KiB-aligned
  // address got no huge page at all and one of 13 MiB lost its ends (measured:
  // 330 of 590 MiB of repacked Q4_0 weights huge). Reserve 2 MiB more, keep
  // the aligned part and give the rest back.
  const size_t reserve = bytes >= kHugePage ? bytes + kHugePage : bytes;
  void* raw = mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED)
    throw Error(what + ": cannot allocate " + std::to_string(bytes) + " bytes: " + std::strerror(errno));
  auto* p = static_cast<char*>(raw);
  if (reserve != bytes) {
    const size_t head = (kHugePage - reinterpret_cast<uintptr_t>(p) % kHugePage) % kHugePage;
    if (head) munmap(p, head);
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t used = (bytes + page - 1) / page * page;  // munmap works in whole pages
    if (reserve - head > used) munmap(p + head + used, reserve - head - used);
    p += head;
  }
  madvise(p, bytes, MADV_HUGEPAGE);  // a hint: without THP the memory still works
  return p;
}

HugePageBuffer::HugePageBuffer(size_t bytes, const std::string& what)
    : data_(bytes ? map_huge_pages(bytes, what) : nullptr), size_(bytes) {}

HugePageBuffer::HugePageBuffer(HugePageBuffer&& o) noexcept { *this = std::move(o); }

HugePageBuffer& HugePageBuffer::operator=(HugePageBuffer&& o) noexcept {
  if (this == &o) return *this;
  if (data_) munmap(data_, size_);
  data_ = std::exchange(o.data_, nullptr);
  size_ = std::exchange(o.size_, 0);
  return *this;
}

HugePageBuffer::~HugePageBuffer() {
  if (data_) munmap(data_, size_);
}

}  // namespace kestrel

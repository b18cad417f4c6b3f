#include "core/huge_page_buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace kestrel {

void* map_huge_pages(size_t bytes, const std::string& what) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    throw Error(what + ": cannot allocate " + std::to_string(bytes) + " bytes: " + std::strerror(errno));
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

#include "core/huge_page_arena.h"

#include <algorithm>

namespace kestrel {
namespace {
constexpr size_t kAlign = 64;  // a cache line: the kernels use aligned loads

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
}  // namespace

HugePageArena::HugePageArena(size_t chunk_bytes)
    : chunk_bytes_(round_up(std::max<size_t>(chunk_bytes, 1), kHugePage)) {}

HugePageArena::Allocation HugePageArena::allocate(size_t bytes, const std::string& what) {
  const size_t need = round_up(std::max<size_t>(bytes, 1), kAlign);
  if (!chunk_ || chunk_->size() - used_ < need) {
    // The rest of the old chunk stays unused (and, untouched, unbacked).
    chunk_ = std::make_shared<HugePageBuffer>(std::max(chunk_bytes_, round_up(need, kHugePage)), what);
    used_ = 0;
  }
  Allocation a{static_cast<uint8_t*>(chunk_->data()) + used_, chunk_};
  used_ += need;
  return a;
}

}  // namespace kestrel

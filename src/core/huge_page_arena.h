#pragma once
// Many buffers carved from few huge-page chunks. A model's repacked weights
// are allocated one after another: in one buffer each, the ones under 2 MiB
// (a 1B model's k and v projections) and every buffer's tail beyond its last
// whole 2 MiB got 4 KiB pages; carved from 2 MiB-aligned chunks they share
// huge pages end to end.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/huge_page_buffer.h"

namespace kestrel {

class HugePageArena {
 public:
  // Chunks hold chunk_bytes (rounded up to 2 MiB) or one larger allocation.
  // Untouched chunk memory costs address space only.
  explicit HugePageArena(size_t chunk_bytes = size_t{64} << 20);

  struct Allocation {
    uint8_t* data = nullptr;                      // 64-byte aligned, zero-filled, `bytes` long
    std::shared_ptr<const HugePageBuffer> owner;  // keeps the chunk mapped after the arena is gone
  };
  // Not thread-safe: weights are prepared one at a time.
  Allocation allocate(size_t bytes, const std::string& what);

 private:
  size_t chunk_bytes_;
  std::shared_ptr<HugePageBuffer> chunk_;
  size_t used_ = 0;
};

}  // namespace kestrel

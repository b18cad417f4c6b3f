#pragma once
// Block names (prefix hashes) -> block ids: open addressing with linear
// probing in a table sized once for the pool (at least twice its blocks, a
// power of two), with backward-shift deletion (no tombstones), so it never
// grows or rehashes: a serving step after warm-up allocates nothing. The
// names are xxh3 hashes already; their low bits index the table.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kestrel {

class BlockNameIndex {
 public:
  explicit BlockNameIndex(int n_blocks = 0);
  int32_t find(uint64_t name) const;         // -1: not named
  bool insert(uint64_t name, int32_t block);  // false: the name is taken (nothing changes)
  void erase(uint64_t name, int32_t block);   // when the name maps to this block
  int size() const { return size_; }

 private:
  struct Slot {
    uint64_t name = 0;
    int32_t block = -1;  // -1: empty
  };
  size_t home(uint64_t name) const { return static_cast<size_t>(name) & mask_; }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  int size_ = 0;
};

}  // namespace kestrel

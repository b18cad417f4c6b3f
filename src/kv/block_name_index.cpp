#include "kv/block_name_index.h"

namespace kestrel {

BlockNameIndex::BlockNameIndex(int n_blocks) {
  size_t capacity = 16;
  while (capacity < 2 * static_cast<size_t>(n_blocks > 0 ? n_blocks : 0)) capacity *= 2;
  slots_.assign(capacity, Slot{});
  mask_ = capacity - 1;
}

int32_t BlockNameIndex::find(uint64_t name) const {
  for (size_t i = home(name);; i = (i + 1) & mask_) {
    const Slot& s = slots_[i];
    if (s.block < 0) return -1;
    if (s.name == name) return s.block;
  }
}

bool BlockNameIndex::insert(uint64_t name, int32_t block) {
  size_t i = home(name);
  for (; slots_[i].block >= 0; i = (i + 1) & mask_)
    if (slots_[i].name == name) return false;
  slots_[i] = {name, block};  // a named block is a pool block: size_ <= blocks < capacity / 2
  size_++;
  return true;
}

void BlockNameIndex::erase(uint64_t name, int32_t block) {
  size_t i = home(name);
  for (; slots_[i].block >= 0 && slots_[i].name != name; i = (i + 1) & mask_) {
  }
  if (slots_[i].block < 0 || slots_[i].block != block) return;
  size_--;
  // Backward shift: move later entries of the probe run into the hole when
  // their home position does not lie cyclically in (hole, their slot].
  for (size_t j = i;;) {
    slots_[i].block = -1;
    for (;;) {
      j = (j + 1) & mask_;
      if (slots_[j].block < 0) return;
      const size_t k = home(slots_[j].name);
      const bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
      if (!stays) break;
    }
    slots_[i] = slots_[j];
    i = j;
  }
}

}  // namespace kestrel

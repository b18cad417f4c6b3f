#pragma once
// The KV rows: per layer, one row of keys and one of values per slot of its
// group's pool (slot = block * block_size + offset; the BlockManager hands
// out the blocks), stored in the layout's types — quantized on write, read
// back as floats.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/huge_page_buffer.h"
#include "kernels/attention.h"
#include "backend/backend.h"
#include "kv/block_manager.h"
#include "kv/kv_layout.h"
#include "kv/prefix_tiers.h"

namespace kestrel {

class KvStore {
 public:
  // group_blocks: the pool size of each group (the full-attention group
  // first, then the sliding one if the layout has sliding layers).
  // state_slots: sequences whose recurrent state the store holds (layout.n_recurrent > 0).
  // memory: where the rows may live (Backend::kv_memory: a device backend's memory), else host memory.
  KvStore(const KvLayout& layout, const std::vector<int>& group_blocks, int block_size, int state_slots = 0,
          Backend* memory = nullptr);

  const KvLayout& layout() const { return layout_; }
  // The group a layer's blocks come from: 1 for sliding layers, else 0.
  int group_of(int layer) const { return n_groups_ > 1 && layout_.is_sliding(layer) ? 1 : 0; }
  int64_t bytes() const;  // every group, every layer

  int block_size() const { return block_size_; }
  // Rows of a block in a layer's group: block_size, or fewer where a row stands for several positions
  // (KvLayout::full_row_stride); a slot there is block * rows + offset / stride.
  int rows_per_block(int layer) const { return group_of(layer) == 0 ? block_size_ / layout_.full_row_stride : block_size_; }
  int64_t k_width(int layer) const { return layout_.k_width_in(group_of(layer)); }
  int64_t v_width(int layer) const { return layout_.v_width_in(group_of(layer)); }
  void write_k(int layer, int64_t slot, const float* x) { k_format_.quantize(x, k_row(layer, slot), k_width(layer)); }
  void write_v(int layer, int64_t slot, const float* x) { v_format_.quantize(x, v_row(layer, slot), v_width(layer)); }
  void read_k(int layer, int64_t slot, float* y) const { k_format_.dequantize(k_row(layer, slot), 0, y, k_width(layer)); }
  void read_v(int layer, int64_t slot, float* y) const { v_format_.dequantize(v_row(layer, slot), 0, y, v_width(layer)); }
  // Carries out the ledger's copy-on-write (and lists it in the copy log, if
  // one is set: a tensor-parallel leader replays it on the other ranks' stores).
  void copy(const BlockCopies& copies);
  void set_copy_log(std::vector<BlockCopy>* log) { copy_log_ = log; }
  PagedKvLayerView layer_view(int layer) const;

  // ---- Entries of the prefix cache's lower tiers (kv/prefix_tiers.h) ----
  // Bytes of one entry: a block's rows in every layer of its group (Full: group 0, Sliding: group 1), or a
  // recurrent state over every recurrent layer (State). 0: the layout has none of that kind.
  int64_t entry_bytes(TierKind kind) const;
  // The tiers' entries may hold rows in a smaller type than the pool's (--cache-type): each row is read as
  // floats and stored in that type on the way out, and back on the way in. Throws Error when the layout's rows
  // do not divide into the type's groups. (Values kept in float32 whatever the type, v_f32_only, stay so.)
  void set_entry_type(KvType type);
  std::string entry_type_name() const;
  // A block's rows (or a prefix snapshot's state) out to `out`, and a block's rows in from `in`; a state entry
  // goes into a live slot through copy() (StateCopy::blob).
  void save_entry(TierKind kind, int32_t index, uint8_t* out) const;
  void load_block(TierKind kind, int32_t block, const uint8_t* in);

  // ---- Recurrent state (KvLayout::n_recurrent layers) ----
  // What a slot's live state has consumed: positions [0, pos); and its checkpoint's (-1: none).
  struct StateMark {
    int64_t pos = 0;
    int64_t checkpoint = -1;
  };
  int n_state_slots() const { return n_state_slots_; }
  // The live state of recurrent layer `rec` (0 .. n_recurrent - 1) in a slot: layout.state_floats floats.
  float* state(int rec, int slot) { return state_row(rec, slot, 0); }
  StateMark& mark(int slot) { return marks_.at(static_cast<size_t>(slot)); }
  const StateMark& mark(int slot) const { return marks_.at(static_cast<size_t>(slot)); }
  // The slot's live state in every recurrent layer set to zeros (a sequence starting at position 0).
  void reset_state(int slot);
  // Its live state copied to its checkpoint (mark.checkpoint = mark.pos), and back (mark.pos = checkpoint).
  void checkpoint_state(int slot);
  void restore_state(int slot);
  // Where a backend writes the layer's rows (Backend::write_kv); v null when the layout keeps keys only.
  KvLayerWrite layer_write(int layer);

 private:
  int64_t k_bytes(int layer) const { return k_row_bytes_[static_cast<size_t>(group_of(layer))]; }
  int64_t v_bytes(int layer) const { return v_row_bytes_[static_cast<size_t>(group_of(layer))]; }
  uint8_t* k_row(int layer, int64_t slot) { return static_cast<uint8_t*>(k_data_[layer]) + slot * k_bytes(layer); }
  uint8_t* v_row(int layer, int64_t slot) { return static_cast<uint8_t*>(v_data_[layer]) + slot * v_bytes(layer); }
  const uint8_t* k_row(int layer, int64_t slot) const {
    return static_cast<const uint8_t*>(k_data_[layer]) + slot * k_bytes(layer);
  }
  const uint8_t* v_row(int layer, int64_t slot) const {
    return static_cast<const uint8_t*>(v_data_[layer]) + slot * v_bytes(layer);
  }

  KvLayout layout_;
  KvRowFormat k_format_, v_format_;
  KvRowFormat entry_k_format_, entry_v_format_;  // the tiers' (set_entry_type; else the pool's)
  int64_t k_row_bytes_[2], v_row_bytes_[2];  // per layer group (full, sliding)
  int block_size_;
  int n_groups_;
  // Per layer, sized by its group's pool: anonymous memory whose pages are
  // committed when first written, so a pool sized for the whole context
  // (DeepSeek-V2-Lite's 163840 tokens: 10 GB of f32 latents) costs only what
  // the sequences fill — zero-filling it up front made it all resident.
  std::vector<HugePageBuffer> k_, v_;
  std::vector<std::shared_ptr<void>> k_device_, v_device_;  // a backend's memory instead (Backend::kv_memory)
  std::vector<void*> k_data_, v_data_;                      // each layer's rows, wherever they are
  std::vector<size_t> k_size_, v_size_;
  std::vector<BlockCopy>* copy_log_ = nullptr;
  // Per recurrent layer: each slot's live state, then its checkpoint; after all slots, the prefix snapshots
  // (as many as slots).
  float* state_row(int rec, int slot, int copy) {
    return static_cast<float*>(states_[static_cast<size_t>(rec)].data()) +
           (2 * static_cast<int64_t>(slot) + copy) * layout_.state_floats;
  }
  float* snapshot_row(int rec, int snapshot) { return state_row(rec, n_state_slots_, 0) + snapshot * layout_.state_floats; }
  const float* snapshot_row(int rec, int snapshot) const {
    return static_cast<const float*>(states_[static_cast<size_t>(rec)].data()) +
           (2 * static_cast<int64_t>(n_state_slots_) + snapshot) * layout_.state_floats;
  }
  void copy_state(const StateCopy& c);
  template <typename Fn>
  void for_each_entry_row(int group, int32_t block, Fn&& fn) const;
  int n_state_slots_ = 0;
  std::vector<HugePageBuffer> states_;
  std::vector<StateMark> marks_;
};

}  // namespace kestrel

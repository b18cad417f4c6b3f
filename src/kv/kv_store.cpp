#include "kv/kv_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace kestrel {

KvStore::KvStore(const KvLayout& layout, const std::vector<int>& group_blocks, int block_size, int state_slots,
                 Backend* memory)
    : layout_(layout),
      k_format_(layout.k_format()),
      v_format_(layout.v_format()),
      entry_k_format_(k_format_),
      entry_v_format_(v_format_),
      block_size_(block_size),
      n_groups_(static_cast<int>(group_blocks.size())),
      n_state_slots_(layout.n_recurrent > 0 ? state_slots : 0) {
  if (layout.n_recurrent > 0 && state_slots < 1)
    throw Error("KV cache: a model with recurrent layers needs at least one state slot");
  for (int r = 0; r < layout.n_recurrent; r++)
    states_.emplace_back(static_cast<size_t>(3 * n_state_slots_ * layout.state_floats) * sizeof(float),
                         fmt::format("recurrent state of layer {}", r));
  marks_.resize(static_cast<size_t>(n_state_slots_));
  for (int g = 0; g < 2; g++) {
    const int64_t kw = layout.k_width_in(g), vw = layout.v_width_in(g);
    if (kw % k_format_.group() != 0 || vw % v_format_.group() != 0)
      throw Error(fmt::format("KV rows of {} and {} elements do not divide into {}/{}-element groups", kw, vw,
                              k_format_.group(), v_format_.group()));
    k_row_bytes_[g] = static_cast<int64_t>(k_format_.bytes(kw));
    v_row_bytes_[g] = static_cast<int64_t>(v_format_.bytes(vw));
  }
  if (layout.full_row_stride < 1 || block_size % layout.full_row_stride != 0)
    throw Error(fmt::format("a KV block of {} positions does not hold whole rows of {} positions (use a block size "
                            "that is a multiple of {})",
                            block_size, layout.full_row_stride, layout.full_row_stride));
  k_.reserve(layout.n_layer);
  v_.reserve(layout.n_layer);
  for (int l = 0; l < layout.n_layer; l++) {
    const size_t slots = static_cast<size_t>(group_blocks[group_of(l)]) * static_cast<size_t>(rows_per_block(l));
    const size_t kb = slots * static_cast<size_t>(k_bytes(l)), vb = slots * static_cast<size_t>(v_bytes(l));
    const std::string kw = fmt::format("KV cache keys of layer {}", l),
                      vw = fmt::format("KV cache values of layer {}", l);
    k_device_.push_back(memory && kb > 0 ? memory->kv_memory(l, kb, kw) : nullptr);
    v_device_.push_back(memory && vb > 0 && k_device_.back() ? memory->kv_memory(l, vb, vw) : nullptr);
    if (k_device_.back() && !v_device_.back() && vb > 0) k_device_.back() = nullptr;  // both or neither
    k_.emplace_back(k_device_.back() ? 0 : kb, kw);
    v_.emplace_back(v_device_.back() ? 0 : vb, vw);
    k_data_.push_back(k_device_.back() ? k_device_.back().get() : k_.back().data());
    v_data_.push_back(v_device_.back() ? v_device_.back().get() : v_.back().data());
    k_size_.push_back(kb);
    v_size_.push_back(vb);
  }
}

void KvStore::reset_state(int slot) {
  for (int r = 0; r < layout_.n_recurrent; r++) std::fill_n(state(r, slot), layout_.state_floats, 0.0f);
  mark(slot) = {};
}

void KvStore::checkpoint_state(int slot) {
  for (int r = 0; r < layout_.n_recurrent; r++)
    std::copy_n(state_row(r, slot, 0), layout_.state_floats, state_row(r, slot, 1));
  mark(slot).checkpoint = mark(slot).pos;
}

void KvStore::restore_state(int slot) {
  StateMark& m = mark(slot);
  if (m.checkpoint < 0) throw Error(fmt::format("recurrent state slot {} has no checkpoint to restore", slot));
  for (int r = 0; r < layout_.n_recurrent; r++)
    std::copy_n(state_row(r, slot, 1), layout_.state_floats, state_row(r, slot, 0));
  m.pos = m.checkpoint;
}

int64_t KvStore::bytes() const {
  int64_t total = 0;
  for (const auto& s : states_) total += static_cast<int64_t>(s.size());
  for (int l = 0; l < layout_.n_layer; l++) total += static_cast<int64_t>(k_size_[l] + v_size_[l]);
  return total;
}

int64_t KvStore::entry_bytes(TierKind kind) const {
  if (kind == TierKind::State) return static_cast<int64_t>(layout_.n_recurrent) * layout_.state_floats * 4;
  const int group = kind == TierKind::Full ? 0 : 1;
  if (group >= n_groups_) return 0;
  int64_t n = 0;
  for (int l = 0; l < layout_.n_layer; l++)
    if (group_of(l) == group)
      n += static_cast<int64_t>(entry_k_format_.bytes(k_width(l)) + entry_v_format_.bytes(v_width(l))) * rows_per_block(l);
  return n;
}

void KvStore::set_entry_type(KvType type) {
  const KvRowFormat k(type, layout_.granule), v(layout_.v_f32_only ? layout_.v_type : type, layout_.granule);
  for (int g = 0; g < 2; g++) {
    const int64_t kw = layout_.k_width_in(g), vw = layout_.v_width_in(g);
    if (kw % k.group() != 0 || vw % v.group() != 0)
      throw Error(fmt::format("--cache-type {}: KV rows of {} and {} elements do not divide into its {}-element groups",
                              kv_type_name(type), kw, vw, k.group()));
  }
  entry_k_format_ = k;
  entry_v_format_ = v;
}

std::string KvStore::entry_type_name() const {
  const KvType k = entry_k_format_.type(), v = entry_v_format_.type();
  return k == v || layout_.v_width == 0 ? kv_type_name(k) : std::string(kv_type_name(k)) + "/" + kv_type_name(v);
}

// A block's rows in an entry's order — per layer of the group, its K rows, then its V rows — each with its format,
// the entry's format for it and its width: the one order save_entry writes and load_block reads.
template <typename Fn>
void KvStore::for_each_entry_row(int group, int32_t block, Fn&& fn) const {
  for (int l = 0; l < layout_.n_layer; l++) {
    if (group_of(l) != group) continue;
    const int rows = rows_per_block(l);
    const int64_t first = static_cast<int64_t>(block) * rows;
    for (int v = 0; v < 2; v++) {
      const int64_t width = v ? v_width(l) : k_width(l);
      if (width == 0) continue;  // a layout of keys only
      uint8_t* data = static_cast<uint8_t*>(v ? v_data_[static_cast<size_t>(l)] : k_data_[static_cast<size_t>(l)]);
      const int64_t row_bytes = v ? v_bytes(l) : k_bytes(l);
      for (int r = 0; r < rows; r++)
        fn(data + (first + r) * row_bytes, v ? v_format_ : k_format_, v ? entry_v_format_ : entry_k_format_, width);
    }
  }
}

void KvStore::save_entry(TierKind kind, int32_t index, uint8_t* out) const {
  if (kind == TierKind::State) {
    if (index < 0 || index >= n_state_slots_) throw Error(fmt::format("KV cache: no prefix snapshot {}", index));
    for (int r = 0; r < layout_.n_recurrent; r++) {
      const auto n = static_cast<size_t>(layout_.state_floats) * sizeof(float);
      std::memcpy(out, snapshot_row(r, index), n);
      out += n;
    }
    return;
  }
  std::vector<float> row;
  for_each_entry_row(kind == TierKind::Full ? 0 : 1, index, [&](const uint8_t* stored, const KvRowFormat& pool,
                                                              const KvRowFormat& entry, int64_t width) {
    if (pool.type() == entry.type()) {
      std::memcpy(out, stored, pool.bytes(width));
    } else {  // through floats into the entry's type
      row.resize(static_cast<size_t>(width));
      pool.dequantize(stored, 0, row.data(), width);
      entry.quantize(row.data(), out, width);
    }
    out += entry.bytes(width);
  });
}

void KvStore::load_block(TierKind kind, int32_t block, const uint8_t* in) {
  if (kind == TierKind::State) throw Error("KV cache: a recurrent state entry goes into a slot, not a block");
  std::vector<float> row;
  for_each_entry_row(kind == TierKind::Full ? 0 : 1, block, [&](uint8_t* stored, const KvRowFormat& pool,
                                                              const KvRowFormat& entry, int64_t width) {
    if (pool.type() == entry.type()) {
      std::memcpy(stored, in, pool.bytes(width));
    } else {
      row.resize(static_cast<size_t>(width));
      entry.dequantize(in, 0, row.data(), width);
      pool.quantize(row.data(), stored, width);
    }
    in += entry.bytes(width);
  });
}

void KvStore::copy_state(const StateCopy& c) {
  if (c.blob) {  // a lower tier's entry into a live slot
    if (c.save || c.slot < 0 || c.slot >= n_state_slots_ ||
        static_cast<int64_t>(c.blob->size()) != entry_bytes(TierKind::State))
      throw Error(fmt::format("recurrent state restore into slot {} from a tier's entry: out of range", c.slot));
    const float* in = reinterpret_cast<const float*>(c.blob->data());
    for (int r = 0; r < layout_.n_recurrent; r++, in += layout_.state_floats)
      std::copy_n(in, layout_.state_floats, state(r, c.slot));
    mark(c.slot) = {c.pos, -1};
    return;
  }
  if (c.slot < 0 || c.slot >= n_state_slots_ || c.snapshot < 0 || c.snapshot >= n_state_slots_)
    throw Error(fmt::format("recurrent state copy between slot {} and snapshot {}: out of range", c.slot, c.snapshot));
  if (c.save && mark(c.slot).pos != c.pos)
    throw Error(fmt::format("recurrent state slot {} holds {} positions, not the {} its snapshot would say", c.slot,
                            mark(c.slot).pos, c.pos));
  for (int r = 0; r < layout_.n_recurrent; r++) {
    float* live = state(r, c.slot);
    float* snap = snapshot_row(r, c.snapshot);
    if (c.save)
      std::copy_n(live, layout_.state_floats, snap);
    else
      std::copy_n(snap, layout_.state_floats, live);
  }
  if (!c.save) mark(c.slot) = {c.pos, -1};
}

void KvStore::copy(const BlockCopies& copies) {
  if (copies.has_state) copy_state(copies.state);
  for (int c = 0; c < copies.n; c++) {
    const BlockCopy& bc = copies.at[static_cast<size_t>(c)];
    if (copy_log_) copy_log_->push_back(bc);
    for (int l = 0; l < layout_.n_layer; l++) {
      if (group_of(l) != bc.group) continue;
      const auto rows = static_cast<size_t>(rows_per_block(l));
      const size_t kw = static_cast<size_t>(k_bytes(l)) * rows;
      const size_t vw = static_cast<size_t>(v_bytes(l)) * rows;
      std::copy_n(k_row(l, bc.from * rows_per_block(l)), kw, k_row(l, bc.to * rows_per_block(l)));
      std::copy_n(v_row(l, bc.from * rows_per_block(l)), vw, v_row(l, bc.to * rows_per_block(l)));
    }
  }
}

KvLayerWrite KvStore::layer_write(int layer) {
  KvLayerWrite w;
  w.k = k_row(layer, 0);
  w.k_stride = k_bytes(layer);
  w.k_width = k_width(layer);
  w.k_format = k_format_;
  if (v_width(layer) > 0) {
    w.v = v_row(layer, 0);
    w.v_stride = v_bytes(layer);
    w.v_width = v_width(layer);
    w.v_format = v_format_;
  }
  return w;
}

PagedKvLayerView KvStore::layer_view(int layer) const {
  return {k_row(layer, 0), v_row(layer, 0), k_bytes(layer), v_bytes(layer), rows_per_block(layer), k_format_, v_format_};
}

}  // namespace kestrel

#include "kv/block_manager.h"

#include <fmt/format.h>

#include <xxhash.h>

#include <algorithm>

#include "core/error.h"

namespace kestrel {

namespace {
// A full block's name: its tokens hashed with the parent block's name as seed.
uint64_t block_name(uint64_t parent, const int32_t* tokens, int block_size) {
  return XXH3_64bits_withSeed(tokens, static_cast<size_t>(block_size) * sizeof(int32_t), parent);
}
}  // namespace

BlockManager::BlockManager(int n_blocks, int block_size, int max_blocks_per_seq, int32_t sliding_window,
                           int sliding_blocks, int state_slots)
    : block_size_(block_size),
      max_blocks_per_seq_(max_blocks_per_seq > 0 ? std::min(max_blocks_per_seq, n_blocks) : n_blocks),
      sliding_window_(sliding_window) {
  if (n_blocks <= 0 || block_size <= 0) throw Error("KV cache needs at least one block of at least one token");
  groups_.resize(sliding_window > 0 ? 2 : 1);
  groups_[0].n_blocks = n_blocks;
  if (sliding_window > 0) groups_[1].n_blocks = sliding_blocks > 0 ? std::min(sliding_blocks, n_blocks) : n_blocks;
  for (Group& g : groups_) {
    // Hand out low block ids first.
    for (int b = g.n_blocks - 1; b >= 0; b--) g.free.push_back(b);
    g.state.resize(static_cast<size_t>(g.n_blocks));
    g.by_name = BlockNameIndex(g.n_blocks);
  }
  if (state_slots < 0) throw Error("KV cache: a negative count of recurrent-state slots");
  n_state_slots_ = state_slots;
  for (int i = state_slots - 1; i >= 0; i--) free_states_.push_back(i);
  snap_name_.assign(static_cast<size_t>(state_slots), 0);
  snap_used_.assign(static_cast<size_t>(state_slots), 0);
}

int32_t BlockManager::take_block(int gi) {
  Group& g = groups_[gi];
  int32_t b;
  if (!g.free.empty()) {
    b = g.free.back();
    g.free.pop_back();
  } else {
    b = g.evictable.front();  // the caller checked n_free()
    g.evictable.pop_front();
    // Its rows go to RAM before anything writes the block (the transfers run before the step).
    if (tiers_ && g.state[b].named && tiers_->wants_spill(kind_of(gi), g.state[b].name))
      transfers_.push_back({TierTransfer::Op::Spill, kind_of(gi), b, g.state[b].name, nullptr});
    forget_name(gi, b);
  }
  g.state[b].refs = 1;
  return b;
}

void BlockManager::release_block(int gi, int32_t b) {
  Group& g = groups_[gi];
  BlockState& st = g.state[b];
  if (--st.refs > 0) return;
  if (st.named)
    st.lru = g.evictable.insert(g.evictable.end(), b);
  else
    g.free.push_back(b);
}

void BlockManager::forget_name(int gi, int32_t b) {
  Group& g = groups_[gi];
  BlockState& st = g.state[b];
  if (!st.named) return;
  g.by_name.erase(st.name, b);
  st.named = false;
}

bool BlockManager::name_block(int gi, int32_t b, uint64_t name) {
  Group& g = groups_[gi];
  // Another sequence may have published the same contents first: keep its
  // block as the name's owner (ours stays private and unnamed).
  if (!g.state[b].named && g.by_name.insert(name, b)) {
    g.state[b].named = true;
    g.state[b].name = name;
    return true;
  }
  return false;
}

void BlockManager::set_tiers(PrefixTiers* tiers, const std::array<int64_t, 3>& entry_bytes) {
  tiers_ = tiers;
  entry_bytes_ = entry_bytes;
  transfers_.clear();
}

int64_t BlockManager::pin_prefix(int32_t seq, int64_t n_tokens, double until_s) {
  auto it = seqs_.find(seq);
  if (!tiers_ || it == seqs_.end()) return 0;
  const Sequence& s = it->second;
  const int64_t k = std::min<int64_t>(n_tokens / block_size_, static_cast<int64_t>(s.names.size()));
  std::vector<PrefixTiers::PinKey> keys;
  for (int64_t j = 0; j < k; j++)
    for (int gi = 0; gi < n_groups(); gi++)
      if (gi == 0 || j >= first_window_block(k * block_size_))
        keys.push_back({kind_of(gi), s.names[static_cast<size_t>(j)], entry_bytes_[static_cast<size_t>(gi)]});
  if (n_state_slots_ > 0 && k > 0) keys.push_back({TierKind::State, s.names[static_cast<size_t>(k - 1)], entry_bytes_[2]});
  return tiers_->pin(keys, until_s);
}

int64_t BlockManager::first_window_block(int64_t pos) const {
  return std::max<int64_t>(0, pos + 1 - sliding_window_) / block_size_;
}

BlockManager::Sequence& BlockManager::new_or_existing(int32_t seq) {
  Sequence& s = seqs_[seq];
  for (auto& blocks : s.blocks)
    if (blocks.capacity() == 0) blocks.reserve(static_cast<size_t>(max_blocks_per_seq_));
  if (s.names.capacity() == 0) s.names.reserve(static_cast<size_t>(max_blocks_per_seq_));
  return s;
}

int64_t BlockManager::share_prefix(int32_t seq, const int32_t* tokens, int64_t n, uint64_t root) {
  Sequence& s = new_or_existing(seq);
  if (s.length != 0 || !s.blocks[0].empty()) throw Error(fmt::format("KV cache: sequence {} is not empty", seq));
  s.names.clear();
  s.restore = -1;
  s.restore_blob = nullptr;
  // The longest run of cached full blocks, never covering the last token (its logits must be computed).
  std::vector<uint64_t>& names = s.names;
  uint64_t parent = root;
  // Queried: every full block the prompt could have found (the hit rate's denominator), not only
  // those looked at before the first miss.
  stats_.queried_blocks += std::min<int64_t>(std::max<int64_t>(n - 1, 0) / block_size_, max_blocks_per_seq_);
  // A block the pool lacks may be in a lower tier: its entry is fetched now (a disk entry read and checked), so
  // that a bad entry ends the run here rather than after the blocks are taken.
  for (auto& f : found_) f.clear();
  for (int64_t i = 0; (i + 1) * block_size_ <= n - 1 && static_cast<int64_t>(names.size()) < max_blocks_per_seq_; i++) {
    const uint64_t name = block_name(parent, tokens + i * block_size_, block_size_);
    PrefixTiers::Blob blob;
    if (groups_[0].by_name.find(name) < 0 && !(tiers_ && (blob = tiers_->fetch(TierKind::Full, name, entry_bytes_[0]))))
      break;
    found_[0].push_back(std::move(blob));
    names.push_back(name);
    parent = name;
  }
  if (n_groups() > 1) found_[1].resize(names.size());
  // Whether block j of a group is in the pool, or a tier's entry for it is at hand (fetched on first ask).
  std::vector<uint8_t>& asked = asked_;
  asked.assign(n_groups() > 1 ? names.size() : 0, 0);
  auto have = [&](int gi, int64_t j) {
    if (groups_[gi].by_name.find(names[static_cast<size_t>(j)]) >= 0) return true;
    if (gi == 1 && tiers_ && !asked[static_cast<size_t>(j)]) {
      asked[static_cast<size_t>(j)] = 1;
      found_[1][static_cast<size_t>(j)] = tiers_->fetch(TierKind::Sliding, names[static_cast<size_t>(j)], entry_bytes_[1]);
    }
    return found_[gi][static_cast<size_t>(j)] != nullptr;
  };
  // With sliding layers the first computed token's window must be cached too:
  // shorten the match until it is.
  auto sliding_cached = [&](int64_t k) {
    for (int64_t j = first_window_block(k * block_size_); j < k; j++)
      if (!have(1, j)) return false;
    return true;
  };
  // Blocks from the tiers each take a block of the pool (after the pool's own are attached): they must fit.
  auto fills_fit = [&](int64_t k) {
    for (int gi = 0; gi < n_groups(); gi++) {
      const Group& g = groups_[gi];
      int64_t fills = 0, attached_free = 0;
      for (int64_t j = gi == 0 ? 0 : first_window_block(k * block_size_); j < k; j++) {
        const int32_t b = g.by_name.find(names[static_cast<size_t>(j)]);
        if (b < 0)
          fills++;
        else if (g.state[b].refs == 0)
          attached_free++;
      }
      if (fills > g.n_free() - attached_free) return false;
    }
    return true;
  };
  int64_t k = static_cast<int64_t>(names.size());
  if (n_groups() > 1)
    while (k > 0 && !sliding_cached(k)) k--;
  while (k > 0 && !fills_fit(k)) k--;
  if (n_state_slots_ > 0) {  // the state at the run's end must be kept too
    auto state_at = [&](int64_t k) {
      const uint64_t name = names[static_cast<size_t>(k - 1)];
      s.restore_blob = nullptr;
      if (snapshot_of(name) >= 0) return true;
      return tiers_ && (s.restore_blob = tiers_->fetch(TierKind::State, name, entry_bytes_[2])) != nullptr;
    };
    while (k > 0 && !(state_at(k) && (n_groups() == 1 || sliding_cached(k)) && fills_fit(k))) k--;
    if (k == 0) s.restore_blob = nullptr;
    if (k > 0 && !s.restore_blob) {
      s.restore = snapshot_of(names[static_cast<size_t>(k - 1)]);
      snap_used_[static_cast<size_t>(s.restore)] = ++snap_clock_;
    }
    s.restore_pos = k * block_size_;
  }
  names.resize(static_cast<size_t>(k));
  stats_.hit_blocks += k;
  // The pool's blocks first (held, so taking blocks for the tiers' entries cannot evict them), then the rest.
  for (int gi = 0; gi < n_groups(); gi++) {
    Group& g = groups_[gi];
    const int64_t first = gi == 0 ? 0 : first_window_block(k * block_size_);
    for (int64_t j = 0; j < k; j++) {
      if (j < first) {
        s.blocks[gi].push_back(-1);
        continue;
      }
      const int32_t b = g.by_name.find(names[j]);
      if (b >= 0 && g.state[b].refs++ == 0) g.evictable.erase(g.state[b].lru);
      s.blocks[gi].push_back(b);
    }
    if (gi == 1) s.released = first;
  }
  for (int gi = 0; gi < n_groups(); gi++)
    for (int64_t j = 0; j < k; j++) {
      int32_t& b = s.blocks[gi][static_cast<size_t>(j)];
      if (b >= 0 || (gi == 1 && j < s.released)) continue;
      b = take_block(gi);
      name_block(gi, b, names[static_cast<size_t>(j)]);
      transfers_.push_back({TierTransfer::Op::Fill, kind_of(gi), b, names[static_cast<size_t>(j)],
                            std::move(found_[gi][static_cast<size_t>(j)])});
      if (gi == 0) tier_hits_.blocks++;
    }
  s.length = k * block_size_;
  return s.length;
}

void BlockManager::publish_prefix(int32_t seq, const int32_t* tokens, int64_t n_computed, uint64_t root) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  Sequence& s = it->second;
  const int64_t full =
      std::min<int64_t>(std::min(n_computed, s.length) / block_size_, static_cast<int64_t>(s.blocks[0].size()));
  for (auto i = static_cast<int64_t>(s.names.size()); i < full; i++) {
    const uint64_t name = block_name(i ? s.names.back() : root, tokens + i * block_size_, block_size_);
    for (int gi = 0; gi < n_groups(); gi++) {
      const int32_t b = s.blocks[gi][i];
      // A block named now is computed now: the disk tier gets a copy (written behind).
      if (b >= 0 && name_block(gi, b, name) && tiers_ && tiers_->wants_persist(kind_of(gi), name))
        transfers_.push_back({TierTransfer::Op::Persist, kind_of(gi), b, name, nullptr});
    }
    s.names.push_back(name);
  }
}

bool BlockManager::can_allocate(int32_t seq, int64_t n_tokens) const {
  const int64_t need_blocks = blocks_for(n_tokens);
  if (need_blocks > max_blocks_per_seq_) return false;
  auto it = seqs_.find(seq);
  if (n_state_slots_ > 0 && (it == seqs_.end() || it->second.state < 0) && free_states_.empty()) return false;
  const int64_t extra = need_blocks - (it == seqs_.end() ? 0 : static_cast<int64_t>(it->second.blocks[0].size()));
  for (const Group& g : groups_)
    if (extra > g.n_free()) return false;
  return true;
}

bool BlockManager::allocate(int32_t seq, int64_t n_tokens) {
  if (!can_allocate(seq, n_tokens)) return false;
  Sequence& s = new_or_existing(seq);
  if (n_state_slots_ > 0 && s.state < 0) {
    s.state = free_states_.back();
    free_states_.pop_back();
  }
  const int64_t extra = blocks_for(n_tokens) - static_cast<int64_t>(s.blocks[0].size());
  for (int gi = 0; gi < n_groups(); gi++)
    for (int64_t i = 0; i < extra; i++) s.blocks[gi].push_back(take_block(gi));
  if (n_tokens > s.length) s.length = n_tokens;
  return true;
}

void BlockManager::slide(int32_t seq, int64_t first) {
  if (n_groups() < 2) return;
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  Sequence& s = it->second;
  auto& blocks = s.blocks[1];
  const int64_t upto = std::min<int64_t>(first_window_block(first), static_cast<int64_t>(blocks.size()));
  for (int64_t j = s.released; j < upto; j++) {
    if (blocks[j] >= 0) release_block(1, blocks[j]);
    blocks[j] = -1;
  }
  s.released = std::max(s.released, upto);
}

bool BlockManager::truncate(int32_t seq, int64_t n_tokens, BlockCopies& copies) {
  copies.n = 0;
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return true;
  Sequence& s = it->second;
  if (n_tokens < 0) n_tokens = 0;
  const auto keep = static_cast<size_t>(blocks_for(n_tokens));
  if (n_tokens > 0 && n_groups() > 1 && first_window_block(n_tokens) < s.released)
    throw Error(fmt::format("KV cache: sequence {} cannot roll back to {} tokens: the sliding-window layers released "
                            "the blocks before {} already",
                            seq, n_tokens, s.released * block_size_));
  for (int gi = 0; gi < n_groups(); gi++) {
    auto& blocks = s.blocks[gi];
    while (blocks.size() > keep) {
      if (blocks.back() >= 0) release_block(gi, blocks.back());
      blocks.pop_back();
    }
  }
  if (keep == 0) s.released = 0;
  if (s.length > n_tokens) s.length = n_tokens;
  if (static_cast<int64_t>(s.names.size()) > n_tokens / block_size_)
    s.names.resize(static_cast<size_t>(n_tokens / block_size_));
  // A partly kept last block will be written again: it must be ours alone and unnamed.
  if (n_tokens % block_size_ == 0) return true;
  for (int gi = 0; gi < n_groups(); gi++) {
    auto& blocks = s.blocks[gi];
    if (blocks.empty() || blocks.back() < 0) continue;
    const int32_t last = blocks.back();
    if (groups_[gi].state[last].refs == 1) {
      forget_name(gi, last);
      continue;
    }
    if (groups_[gi].n_free() == 0) return false;
    const int32_t copy = take_block(gi);
    copies.at[static_cast<size_t>(copies.n++)] = {gi, last, copy};
    release_block(gi, last);
    blocks.back() = copy;
  }
  return true;
}

void BlockManager::erase(int32_t seq) {
  BlockCopies none;
  truncate(seq, 0, none);  // to 0 tokens: nothing is kept, nothing copied
  auto it = seqs_.find(seq);
  if (it != seqs_.end() && it->second.state >= 0) free_states_.push_back(it->second.state);
  seqs_.erase(seq);
}

int64_t BlockManager::length(int32_t seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second.length;
}

int64_t BlockManager::held_blocks(int32_t seq, int group) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return 0;
  const auto& blocks = it->second.blocks[group];
  return static_cast<int64_t>(std::count_if(blocks.begin(), blocks.end(), [](int32_t b) { return b >= 0; }));
}

const BlockManager::Sequence& BlockManager::seq_or_throw(int32_t seq) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) throw Error(fmt::format("KV cache: unknown sequence {}", seq));
  return it->second;
}

int32_t BlockManager::snapshot_of(uint64_t name) const {
  for (size_t i = 0; i < snap_name_.size(); i++)
    if (snap_used_[i] > 0 && snap_name_[i] == name) return static_cast<int32_t>(i);
  return -1;
}

std::optional<StateCopy> BlockManager::save_snapshot(int32_t seq, int64_t n_computed) {
  auto it = seqs_.find(seq);
  if (n_state_slots_ == 0 || it == seqs_.end() || it->second.state < 0 || n_computed <= 0 ||
      n_computed % block_size_ != 0 || static_cast<int64_t>(it->second.names.size()) != n_computed / block_size_)
    return std::nullopt;
  const uint64_t name = it->second.names.back();
  if (const int32_t have = snapshot_of(name); have >= 0) {
    snap_used_[static_cast<size_t>(have)] = ++snap_clock_;
    return std::nullopt;
  }
  const auto oldest = std::min_element(snap_used_.begin(), snap_used_.end()) - snap_used_.begin();
  const auto o = static_cast<int32_t>(oldest);
  if (tiers_ && snap_used_[static_cast<size_t>(o)] > 0 && tiers_->wants_spill(TierKind::State, snap_name_[static_cast<size_t>(o)]))
    transfers_.push_back({TierTransfer::Op::Spill, TierKind::State, o, snap_name_[static_cast<size_t>(o)], nullptr});
  snap_name_[static_cast<size_t>(oldest)] = name;
  snap_used_[static_cast<size_t>(oldest)] = ++snap_clock_;
  if (tiers_ && tiers_->wants_persist(TierKind::State, name))
    transfers_.push_back({TierTransfer::Op::Persist, TierKind::State, o, name, nullptr});
  return StateCopy{true, it->second.state, o, n_computed, nullptr};
}

std::optional<StateCopy> BlockManager::take_state_restore(int32_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end() || (it->second.restore < 0 && !it->second.restore_blob) || it->second.state < 0)
    return std::nullopt;
  StateCopy c{false, it->second.state, it->second.restore, it->second.restore_pos, std::move(it->second.restore_blob)};
  it->second.restore = -1;
  it->second.restore_blob = nullptr;
  return c;
}

std::optional<StateCopy> BlockManager::prefix_state(int32_t seq) const {
  const Sequence& s = seq_or_throw(seq);
  if (s.restore < 0 && !s.restore_blob) return std::nullopt;
  return StateCopy{false, s.state, s.restore, s.restore_pos, s.restore_blob};
}

int32_t BlockManager::state_slot(int32_t seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? -1 : it->second.state;
}

const int32_t* BlockManager::block_table(int32_t seq, int group) const { return seq_or_throw(seq).blocks[group].data(); }

int64_t BlockManager::slot(int32_t seq, int32_t pos, int group) const {
  const Sequence& s = seq_or_throw(seq);
  if (pos < 0 || pos >= s.length)
    throw Error(fmt::format("KV cache: position {} of sequence {} is outside its {} reserved tokens", pos, seq, s.length));
  const int32_t block = s.blocks[group][pos / block_size_];
  if (block < 0) throw Error(fmt::format("KV cache: position {} of sequence {} left the sliding window", pos, seq));
  return static_cast<int64_t>(block) * block_size_ + pos % block_size_;
}

}  // namespace kestrel

#include "runtime/kv_cache.h"

#include <fmt/format.h>

#include <xxhash.h>

#include <algorithm>

#include "core/error.h"

namespace kestrel {

PagedKvCache::PagedKvCache(const KvLayout& layout, int n_blocks, int block_size, int max_blocks_per_seq)
    : layout_(layout), k_format_(layout.k_format()), v_format_(layout.v_format()),
      k_row_bytes_(static_cast<int64_t>(k_format_.bytes(layout.k_width))),
      v_row_bytes_(static_cast<int64_t>(v_format_.bytes(layout.v_width))), n_blocks_(n_blocks), block_size_(block_size),
      max_blocks_per_seq_(max_blocks_per_seq > 0 ? std::min(max_blocks_per_seq, n_blocks) : n_blocks) {
  if (n_blocks <= 0 || block_size <= 0) throw Error("KV cache needs at least one block of at least one token");
  if (layout.k_width % k_format_.group() != 0 || layout.v_width % v_format_.group() != 0)
    throw Error(fmt::format("KV rows of {} and {} elements do not divide into {}/{}-element groups", layout.k_width,
                            layout.v_width, k_format_.group(), v_format_.group()));
  const size_t slots = static_cast<size_t>(n_blocks) * static_cast<size_t>(block_size);
  k_.resize(layout.n_layer);
  v_.resize(layout.n_layer);
  for (int l = 0; l < layout.n_layer; l++) {
    k_[l].assign(slots * static_cast<size_t>(k_row_bytes_), 0);
    v_[l].assign(slots * static_cast<size_t>(v_row_bytes_), 0);
  }
  // Hand out low block ids first.
  for (int b = n_blocks - 1; b >= 0; b--) free_.push_back(b);
  state_.resize(static_cast<size_t>(n_blocks));
}

int32_t PagedKvCache::take_block() {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    b = evictable_.front();  // the caller checked n_free_blocks()
    evictable_.pop_front();
    forget_name(b);
  }
  state_[b].refs = 1;
  return b;
}

void PagedKvCache::release_block(int32_t b) {
  BlockState& st = state_[b];
  if (--st.refs > 0) return;
  if (st.named) st.lru = evictable_.insert(evictable_.end(), b);
  else free_.push_back(b);
}

void PagedKvCache::forget_name(int32_t b) {
  BlockState& st = state_[b];
  if (!st.named) return;
  auto it = by_name_.find(st.name);
  if (it != by_name_.end() && it->second == b) by_name_.erase(it);
  st.named = false;
}

void PagedKvCache::copy_block(int32_t from, int32_t to) {
  const size_t bs = static_cast<size_t>(block_size_);
  for (int l = 0; l < layout_.n_layer; l++) {
    const size_t kw = static_cast<size_t>(k_row_bytes_) * bs, vw = static_cast<size_t>(v_row_bytes_) * bs;
    std::copy_n(k_[l].data() + from * kw, kw, k_[l].data() + to * kw);
    std::copy_n(v_[l].data() + from * vw, vw, v_[l].data() + to * vw);
  }
}

namespace {
// A full block's name: its tokens hashed with the parent block's name as seed.
uint64_t block_name(uint64_t parent, const int32_t* tokens, int block_size) {
  return XXH3_64bits_withSeed(tokens, static_cast<size_t>(block_size) * sizeof(int32_t), parent);
}
}  // namespace

int64_t PagedKvCache::share_prefix(int32_t seq, const int32_t* tokens, int64_t n) {
  Sequence& s = seqs_[seq];
  if (s.length != 0 || !s.blocks.empty()) throw Error(fmt::format("KV cache: sequence {} is not empty", seq));
  if (s.blocks.capacity() == 0) s.blocks.reserve(static_cast<size_t>(max_blocks_per_seq_));
  if (s.names.capacity() == 0) s.names.reserve(static_cast<size_t>(max_blocks_per_seq_));
  s.names.clear();
  uint64_t parent = 0;
  // Full blocks only, and never the last token: its logits must be computed.
  for (int64_t i = 0; (i + 1) * block_size_ <= n - 1 && static_cast<int64_t>(s.blocks.size()) < max_blocks_per_seq_; i++) {
    stats_.queried_blocks++;
    const uint64_t name = block_name(parent, tokens + i * block_size_, block_size_);
    auto it = by_name_.find(name);
    if (it == by_name_.end()) break;
    const int32_t b = it->second;
    if (state_[b].refs++ == 0) evictable_.erase(state_[b].lru);
    s.blocks.push_back(b);
    s.names.push_back(name);
    stats_.hit_blocks++;
    parent = name;
  }
  s.length = static_cast<int64_t>(s.blocks.size()) * block_size_;
  return s.length;
}

void PagedKvCache::publish_prefix(int32_t seq, const int32_t* tokens, int64_t n_computed) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  Sequence& s = it->second;
  const int64_t full = std::min<int64_t>(std::min(n_computed, s.length) / block_size_, static_cast<int64_t>(s.blocks.size()));
  if (s.names.capacity() == 0) s.names.reserve(static_cast<size_t>(max_blocks_per_seq_));
  for (auto i = static_cast<int64_t>(s.names.size()); i < full; i++) {
    const uint64_t name = block_name(i ? s.names.back() : 0, tokens + i * block_size_, block_size_);
    const int32_t b = s.blocks[i];
    // Another sequence may have published the same contents first: keep its
    // block as the name's owner (ours stays private and unnamed).
    if (!state_[b].named && by_name_.emplace(name, b).second) {
      state_[b].named = true;
      state_[b].name = name;
    }
    s.names.push_back(name);
  }
}

void PagedKvCache::reserve(int32_t seq, int64_t n_tokens) {
  Sequence& s = seqs_[seq];
  if (s.blocks.capacity() == 0) s.blocks.reserve(static_cast<size_t>(max_blocks_per_seq_));
  const int64_t need_blocks = (n_tokens + block_size_ - 1) / block_size_;
  const int64_t extra = need_blocks - static_cast<int64_t>(s.blocks.size());
  if (extra > n_free_blocks())
    throw Error(fmt::format("KV cache full: sequence {} needs {} tokens ({} more blocks) but only {} of {} blocks are free",
                            seq, n_tokens, extra, n_free_blocks(), n_blocks_));
  if (need_blocks > max_blocks_per_seq_)
    throw Error(fmt::format("KV cache: sequence {} needs {} blocks, more than the {} a sequence may hold", seq,
                            need_blocks, max_blocks_per_seq_));
  for (int64_t i = 0; i < extra; i++) s.blocks.push_back(take_block());
  if (n_tokens > s.length) s.length = n_tokens;
}

void PagedKvCache::truncate(int32_t seq, int64_t n_tokens) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  Sequence& s = it->second;
  if (n_tokens < 0) n_tokens = 0;
  const auto keep = static_cast<size_t>((n_tokens + block_size_ - 1) / block_size_);
  while (s.blocks.size() > keep) {
    release_block(s.blocks.back());
    s.blocks.pop_back();
  }
  if (s.length > n_tokens) s.length = n_tokens;
  if (static_cast<int64_t>(s.names.size()) > n_tokens / block_size_) s.names.resize(static_cast<size_t>(n_tokens / block_size_));
  // A partly kept last block will be written again: it must be ours alone and unnamed.
  if (n_tokens % block_size_ != 0 && !s.blocks.empty()) {
    const int32_t last = s.blocks.back();
    if (state_[last].refs > 1) {
      if (n_free_blocks() == 0) throw Error(fmt::format("KV cache full: cannot copy a shared block of sequence {}", seq));
      const int32_t copy = take_block();
      copy_block(last, copy);
      release_block(last);
      s.blocks.back() = copy;
    } else {
      forget_name(last);
    }
  }

}

void PagedKvCache::remove(int32_t seq) { truncate(seq, 0); }

void PagedKvCache::erase(int32_t seq) {
  truncate(seq, 0);
  seqs_.erase(seq);
}

int64_t PagedKvCache::length(int32_t seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second.length;
}

const PagedKvCache::Sequence& PagedKvCache::seq_or_throw(int32_t seq) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) throw Error(fmt::format("KV cache: unknown sequence {}", seq));
  return it->second;
}

const int32_t* PagedKvCache::block_table(int32_t seq) const { return seq_or_throw(seq).blocks.data(); }

int64_t PagedKvCache::slot(int32_t seq, int32_t pos) const {
  const Sequence& s = seq_or_throw(seq);
  if (pos < 0 || pos >= s.length)
    throw Error(fmt::format("KV cache: position {} of sequence {} is outside its {} reserved tokens", pos, seq, s.length));
  return static_cast<int64_t>(s.blocks[pos / block_size_]) * block_size_ + pos % block_size_;
}

PagedKvLayerView PagedKvCache::layer_view(int layer) const {
  return {k_[layer].data(), v_[layer].data(), k_row_bytes_, v_row_bytes_, block_size_, k_format_, v_format_};
}

}  // namespace kestrel

#include "runtime/kv_cache.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace kestrel {

PagedKvCache::PagedKvCache(const KvLayout& layout, int n_blocks, int block_size, int max_blocks_per_seq)
    : layout_(layout), n_blocks_(n_blocks), block_size_(block_size),
      max_blocks_per_seq_(max_blocks_per_seq > 0 ? std::min(max_blocks_per_seq, n_blocks) : n_blocks) {
  if (n_blocks <= 0 || block_size <= 0) throw Error("KV cache needs at least one block of at least one token");
  const size_t slots = static_cast<size_t>(n_blocks) * static_cast<size_t>(block_size);
  k_.resize(layout.n_layer);
  v_.resize(layout.n_layer);
  for (int l = 0; l < layout.n_layer; l++) {
    k_[l].assign(slots * static_cast<size_t>(layout.k_width), 0.0f);
    v_[l].assign(slots * static_cast<size_t>(layout.v_width), 0.0f);
  }
  // Hand out low block ids first.
  for (int b = n_blocks - 1; b >= 0; b--) free_.push_back(b);
}

void PagedKvCache::reserve(int32_t seq, int64_t n_tokens) {
  Sequence& s = seqs_[seq];
  if (s.blocks.capacity() == 0) s.blocks.reserve(static_cast<size_t>(max_blocks_per_seq_));
  const int64_t need_blocks = (n_tokens + block_size_ - 1) / block_size_;
  const int64_t extra = need_blocks - static_cast<int64_t>(s.blocks.size());
  if (extra > static_cast<int64_t>(free_.size()))
    throw Error(fmt::format("KV cache full: sequence {} needs {} tokens ({} more blocks) but only {} of {} blocks are free",
                            seq, n_tokens, extra, free_.size(), n_blocks_));
  for (int64_t i = 0; i < extra; i++) {
    s.blocks.push_back(free_.back());
    free_.pop_back();
  }
  if (n_tokens > s.length) s.length = n_tokens;
}

void PagedKvCache::truncate(int32_t seq, int64_t n_tokens) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  Sequence& s = it->second;
  const auto keep = static_cast<size_t>((n_tokens + block_size_ - 1) / block_size_);
  while (s.blocks.size() > keep) {
    free_.push_back(s.blocks.back());
    s.blocks.pop_back();
  }
  if (s.length > n_tokens) s.length = n_tokens;
}

void PagedKvCache::remove(int32_t seq) { truncate(seq, 0); }

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
  return {k_[layer].data(), v_[layer].data(), layout_.k_width, layout_.v_width, block_size_};
}

}  // namespace kestrel

#pragma once
// Paged KV cache: one pool of fixed-size blocks per layer, and a block table
// per sequence. What a slot holds (k_width / v_width floats) is up to the
// architecture: per-head K and V for Llama, a latent vector for MLA.
//
// Prefix caching: a full block is named by a hash of its tokens chained with
// its parent block's hash (xxh3), so equal prefixes give equal names. Blocks
// are reference counted; a sequence starting with a known prefix shares the
// blocks already computed for it. A block nobody holds but whose contents
// are named stays findable until the pool needs it (least recently freed
// first). Shared blocks are never written: a sequence truncated into one
// gets its own copy first.
#include <cstdint>
#include <list>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/attention.h"

namespace kestrel {

struct KvLayout {
  int n_layer = 0;
  int64_t k_width = 0;  // elements per token per layer
  int64_t v_width = 0;
  int64_t granule = 1;  // attention reads rows in pieces at multiples of this (the head size)
  KvType k_type = KvType::F32, v_type = KvType::F32;

  KvRowFormat k_format() const { return KvRowFormat(k_type, granule); }
  KvRowFormat v_format() const { return KvRowFormat(v_type, granule); }
  // Bytes of K and V one token takes over all layers.
  int64_t bytes_per_token() const {
    return n_layer * static_cast<int64_t>(k_format().bytes(k_width) + v_format().bytes(v_width));
  }
  // "q8_0", or "q8_0/q4" when keys and values differ.
  std::string type_name() const {
    return k_type == v_type || v_width == 0 ? kv_type_name(k_type)
                                            : std::string(kv_type_name(k_type)) + "/" + kv_type_name(v_type);
  }
};

class PagedKvCache {
 public:
  // max_blocks_per_seq (0: n_blocks) sizes each block table once, so that
  // growing a sequence never allocates.
  PagedKvCache(const KvLayout& layout, int n_blocks, int block_size, int max_blocks_per_seq = 0);

  int block_size() const { return block_size_; }
  int n_blocks() const { return n_blocks_; }
  // Blocks a new reservation can take: never used, or cached but held by nobody.
  int n_free_blocks() const { return static_cast<int>(free_.size() + evictable_.size()); }
  int n_cached_blocks() const { return static_cast<int>(evictable_.size()); }
  int64_t capacity_tokens() const { return static_cast<int64_t>(n_blocks_) * block_size_; }

  // Makes room for positions [0, n_tokens) of seq; throws Error when the pool is exhausted.
  void reserve(int32_t seq, int64_t n_tokens);
  // Drops positions >= n_tokens (rollback); frees blocks no longer needed.
  void truncate(int32_t seq, int64_t n_tokens);
  // Frees all of seq's blocks. The (empty) table is kept for the id's reuse.
  void remove(int32_t seq);
  // Frees all of seq's blocks and forgets the id (the server: one id per request).
  void erase(int32_t seq);
  int n_used_blocks() const { return n_blocks_ - n_free_blocks(); }
  int64_t length(int32_t seq) const;  // positions reserved

  // For an empty sequence about to run tokens[0, n): attaches the longest
  // run of cached full blocks matching its prefix, leaving at least the last
  // token to compute (its logits are needed). Returns the tokens covered,
  // whose KV is then already in place (length() says the same).
  int64_t share_prefix(int32_t seq, const int32_t* tokens, int64_t n);
  // Names seq's full blocks within its first n_computed tokens (whose KV is
  // written) so that later sequences can share them.
  void publish_prefix(int32_t seq, const int32_t* tokens, int64_t n_computed);
  struct PrefixStats {
    int64_t queried_blocks = 0, hit_blocks = 0;
  };
  const PrefixStats& prefix_stats() const { return stats_; }
  const int32_t* block_table(int32_t seq) const;
  int64_t slot(int32_t seq, int32_t pos) const;
  // A token's keys / values for one layer, stored in the cache's type
  // (quantized on write) and read back as floats.
  void write_k(int layer, int64_t slot, const float* x) { k_format_.quantize(x, k_row(layer, slot), layout_.k_width); }
  void write_v(int layer, int64_t slot, const float* x) { v_format_.quantize(x, v_row(layer, slot), layout_.v_width); }
  void read_k(int layer, int64_t slot, float* y) const { k_format_.dequantize(k_row(layer, slot), 0, y, layout_.k_width); }
  void read_v(int layer, int64_t slot, float* y) const { v_format_.dequantize(v_row(layer, slot), 0, y, layout_.v_width); }
  const KvLayout& layout() const { return layout_; }
  PagedKvLayerView layer_view(int layer) const;

 private:
  struct Sequence {
    std::vector<int32_t> blocks;
    int64_t length = 0;
    std::vector<uint64_t> names;  // names of the leading blocks known so far (shared or published)
  };
  struct BlockState {
    int32_t refs = 0;
    bool named = false;
    uint64_t name = 0;
    std::list<int32_t>::iterator lru;  // position in evictable_ when refs == 0 and named
  };
  const Sequence& seq_or_throw(int32_t seq) const;
  int32_t take_block();              // a never-used block, else the least recently freed cached one
  void release_block(int32_t block);  // one holder fewer
  void forget_name(int32_t block);
  void copy_block(int32_t from, int32_t to);
  uint8_t* k_row(int layer, int64_t slot) { return k_[layer].data() + slot * k_row_bytes_; }
  uint8_t* v_row(int layer, int64_t slot) { return v_[layer].data() + slot * v_row_bytes_; }
  const uint8_t* k_row(int layer, int64_t slot) const { return k_[layer].data() + slot * k_row_bytes_; }
  const uint8_t* v_row(int layer, int64_t slot) const { return v_[layer].data() + slot * v_row_bytes_; }

  KvLayout layout_;
  KvRowFormat k_format_, v_format_;
  int64_t k_row_bytes_, v_row_bytes_;
  int n_blocks_;
  int block_size_;
  int max_blocks_per_seq_;
  std::vector<std::vector<uint8_t>> k_, v_;
  std::vector<int32_t> free_;          // never named, held by nobody
  std::list<int32_t> evictable_;       // named, held by nobody: oldest first
  std::vector<BlockState> state_;
  std::unordered_map<uint64_t, int32_t> by_name_;
  std::map<int32_t, Sequence> seqs_;
  PrefixStats stats_;
};

}  // namespace kestrel

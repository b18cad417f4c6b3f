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
#include <unordered_map>
#include <vector>

#include "kernels/attention.h"

namespace kestrel {

struct KvLayout {
  int n_layer = 0;
  int64_t k_width = 0;  // floats per token per layer
  int64_t v_width = 0;
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
  float* k(int layer, int64_t slot) { return k_[layer].data() + slot * layout_.k_width; }
  float* v(int layer, int64_t slot) { return v_[layer].data() + slot * layout_.v_width; }
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

  KvLayout layout_;
  int n_blocks_;
  int block_size_;
  int max_blocks_per_seq_;
  std::vector<std::vector<float>> k_, v_;
  std::vector<int32_t> free_;          // never named, held by nobody
  std::list<int32_t> evictable_;       // named, held by nobody: oldest first
  std::vector<BlockState> state_;
  std::unordered_map<uint64_t, int32_t> by_name_;
  std::map<int32_t, Sequence> seqs_;
  PrefixStats stats_;
};

}  // namespace kestrel

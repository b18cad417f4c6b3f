#pragma once
// Paged KV cache: pools of fixed-size blocks, and block tables per sequence.
// What a slot holds (k_width / v_width elements per layer) is up to the
// architecture: per-head K and V for Llama, a latent vector for MLA.
//
// Layer groups: a model with sliding-window layers (Gemma 2/3) keeps those
// layers in a second group with its own blocks and block tables. A query at
// position p of a sliding layer reads only positions > p - window, so once a
// sequence's batches have moved past a block's window (slide()), that block
// is released for the sliding layers while the full-attention layers keep
// theirs: at a 32K context a 4K-window layer holds about 4K positions.
//
// Prefix caching: a full block is named by a hash of its tokens chained with
// its parent block's hash (xxh3), so equal prefixes give equal names. Blocks
// are reference counted; a sequence starting with a known prefix shares the
// blocks already computed for it (in the sliding group, those its first new
// token's window reaches). A block nobody holds but whose contents are named
// stays findable until the pool needs it (least recently freed first).
// Shared blocks are never written: a sequence truncated into one gets its
// own copy first.
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
  // Sliding-window layers (sliding[l] set) attend over the last
  // sliding_window positions; empty or window 0: none.
  int32_t sliding_window = 0;
  std::vector<uint8_t> sliding = {};

  KvRowFormat k_format() const { return KvRowFormat(k_type, granule); }
  KvRowFormat v_format() const { return KvRowFormat(v_type, granule); }
  bool is_sliding(int layer) const {
    return sliding_window > 0 && layer < static_cast<int>(sliding.size()) && sliding[layer];
  }
  int n_sliding() const {
    int n = 0;
    for (int l = 0; l < n_layer; l++) n += is_sliding(l);
    return n;
  }
  // Bytes of K and V one token takes in one layer.
  int64_t bytes_per_layer_token() const {
    return static_cast<int64_t>(k_format().bytes(k_width) + v_format().bytes(v_width));
  }
  // Bytes of K and V one token takes over all layers (sliding ones included).
  int64_t bytes_per_token() const { return n_layer * bytes_per_layer_token(); }
  // ... over the full-attention layers only: what grows with the context.
  int64_t full_bytes_per_token() const { return (n_layer - n_sliding()) * bytes_per_layer_token(); }
  // "64.0 KiB/token", or with sliding layers what grows with the context
  // and what only a window holds: "16.0 KiB/token + 48.0 KiB/token over the last 4096".
  std::string describe_bytes() const;
  // Tokens of context whose KV fits in `bytes` (one sequence; sliding layers
  // hold at most their window); -1: unbounded (every layer slides).
  int64_t tokens_in(int64_t bytes) const;
  // "q8_0", or "q8_0/q4" when keys and values differ.
  std::string type_name() const {
    return k_type == v_type || v_width == 0 ? kv_type_name(k_type)
                                            : std::string(kv_type_name(k_type)) + "/" + kv_type_name(v_type);
  }
};

class PagedKvCache {
 public:
  // max_blocks_per_seq (0: n_blocks) sizes each block table once, so that
  // growing a sequence never allocates. sliding_blocks sizes the sliding
  // layers' pool (0: n_blocks; ignored without sliding layers).
  PagedKvCache(const KvLayout& layout, int n_blocks, int block_size, int max_blocks_per_seq = 0,
               int sliding_blocks = 0);

  int block_size() const { return block_size_; }
  // Counts of the full-attention layers' pool (what limits the context).
  int n_blocks() const { return groups_[0].n_blocks; }
  // Blocks a new reservation can take: never used, or cached but held by nobody.
  int n_free_blocks() const { return groups_[0].n_free(); }
  int n_cached_blocks() const { return static_cast<int>(groups_[0].evictable.size()); }
  int64_t capacity_tokens() const { return static_cast<int64_t>(n_blocks()) * block_size_; }
  int n_used_blocks() const { return n_blocks() - n_free_blocks(); }
  // 1, or 2 with sliding-window layers (group 1).
  int n_groups() const { return static_cast<int>(groups_.size()); }
  int group_of(int layer) const { return n_groups() > 1 && layout_.is_sliding(layer) ? 1 : 0; }
  int n_group_blocks(int group) const { return groups_[group].n_blocks; }
  int n_group_free_blocks(int group) const { return groups_[group].n_free(); }
  // Blocks seq holds in a group (released sliding blocks not counted).
  int64_t held_blocks(int32_t seq, int group) const;
  // Bytes of the whole cache (every group, every layer).
  int64_t bytes() const;

  // Makes room for positions [0, n_tokens) of seq; throws Error when the pool is exhausted.
  void reserve(int32_t seq, int64_t n_tokens);
  // Tells the cache that no query of seq will come before position `first`
  // again (the next batch starts there; rollbacks never go below it): the
  // sliding layers release the blocks wholly outside that query's window.
  void slide(int32_t seq, int64_t first);
  // Drops positions >= n_tokens (rollback); frees blocks no longer needed.
  void truncate(int32_t seq, int64_t n_tokens);
  // Frees all of seq's blocks. The (empty) table is kept for the id's reuse.
  void remove(int32_t seq);
  // Frees all of seq's blocks and forgets the id (the server: one id per request).
  void erase(int32_t seq);
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
  // A sequence's block table in a group (released sliding blocks are -1).
  const int32_t* block_table(int32_t seq, int group = 0) const;
  int64_t slot(int32_t seq, int32_t pos, int group = 0) const;
  // A token's keys / values for one layer, stored in the cache's type
  // (quantized on write) and read back as floats. `slot` is in the layer's group.
  void write_k(int layer, int64_t slot, const float* x) { k_format_.quantize(x, k_row(layer, slot), layout_.k_width); }
  void write_v(int layer, int64_t slot, const float* x) { v_format_.quantize(x, v_row(layer, slot), layout_.v_width); }
  void read_k(int layer, int64_t slot, float* y) const { k_format_.dequantize(k_row(layer, slot), 0, y, layout_.k_width); }
  void read_v(int layer, int64_t slot, float* y) const { v_format_.dequantize(v_row(layer, slot), 0, y, layout_.v_width); }
  const KvLayout& layout() const { return layout_; }
  PagedKvLayerView layer_view(int layer) const;

 private:
  struct BlockState {
    int32_t refs = 0;
    bool named = false;
    uint64_t name = 0;
    std::list<int32_t>::iterator lru;  // position in evictable when refs == 0 and named
  };
  // One pool of blocks and the layers stored in it.
  struct Group {
    int n_blocks = 0;
    std::vector<int32_t> free;          // never named, held by nobody
    std::list<int32_t> evictable;       // named, held by nobody: oldest first
    std::vector<BlockState> state;
    std::unordered_map<uint64_t, int32_t> by_name;
    int n_free() const { return static_cast<int>(free.size() + evictable.size()); }
  };
  struct Sequence {
    std::vector<int32_t> blocks[2];  // per group; -1: a released sliding block
    int64_t length = 0;
    int64_t released = 0;          // sliding blocks [0, released) are -1
    std::vector<uint64_t> names;   // names of the leading blocks known so far (shared or published)
  };
  const Sequence& seq_or_throw(int32_t seq) const;
  Sequence& new_or_existing(int32_t seq);
  int32_t take_block(int g);              // a never-used block, else the least recently freed cached one
  void release_block(int g, int32_t block);  // one holder fewer
  void forget_name(int g, int32_t block);
  void copy_block(int g, int32_t from, int32_t to);
  void name_block(int g, int32_t block, uint64_t name);
  // Blocks seq needs in the sliding group for a query at `pos`: from this index.
  int64_t first_window_block(int64_t pos) const;
  uint8_t* k_row(int layer, int64_t slot) { return k_[layer].data() + slot * k_row_bytes_; }
  uint8_t* v_row(int layer, int64_t slot) { return v_[layer].data() + slot * v_row_bytes_; }
  const uint8_t* k_row(int layer, int64_t slot) const { return k_[layer].data() + slot * k_row_bytes_; }
  const uint8_t* v_row(int layer, int64_t slot) const { return v_[layer].data() + slot * v_row_bytes_; }

  KvLayout layout_;
  KvRowFormat k_format_, v_format_;
  int64_t k_row_bytes_, v_row_bytes_;
  int block_size_;
  int max_blocks_per_seq_;
  std::vector<Group> groups_;
  std::vector<std::vector<uint8_t>> k_, v_;  // per layer, sized by its group's pool
  std::map<int32_t, Sequence> seqs_;
  PrefixStats stats_;
};

}  // namespace kestrel

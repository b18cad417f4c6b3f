#pragma once
// Paged KV cache: one pool of fixed-size blocks per layer, and a block table
// per sequence. What a slot holds (k_width / v_width floats) is up to the
// architecture: per-head K and V for Llama, a latent vector for MLA.
#include <cstdint>
#include <map>
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
  int n_free_blocks() const { return static_cast<int>(free_.size()); }
  int64_t capacity_tokens() const { return static_cast<int64_t>(n_blocks_) * block_size_; }

  // Makes room for positions [0, n_tokens) of seq; throws Error when the pool is exhausted.
  void reserve(int32_t seq, int64_t n_tokens);
  // Drops positions >= n_tokens (rollback); frees blocks no longer needed.
  void truncate(int32_t seq, int64_t n_tokens);
  // Frees all of seq's blocks. The (empty) table is kept for the id's reuse.
  void remove(int32_t seq);
  int64_t length(int32_t seq) const;  // positions reserved

  const int32_t* block_table(int32_t seq) const;
  int64_t slot(int32_t seq, int32_t pos) const;
  float* k(int layer, int64_t slot) { return k_[layer].data() + slot * layout_.k_width; }
  float* v(int layer, int64_t slot) { return v_[layer].data() + slot * layout_.v_width; }
  PagedKvLayerView layer_view(int layer) const;

 private:
  struct Sequence {
    std::vector<int32_t> blocks;
    int64_t length = 0;
  };
  const Sequence& seq_or_throw(int32_t seq) const;

  KvLayout layout_;
  int n_blocks_;
  int block_size_;
  int max_blocks_per_seq_;
  std::vector<std::vector<float>> k_, v_;
  std::vector<int32_t> free_;
  std::map<int32_t, Sequence> seqs_;
};

}  // namespace kestrel

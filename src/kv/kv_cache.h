#pragma once
// Paged KV cache: the ledger of blocks (BlockManager: block tables,
// reference counts, prefix names, sliding-window groups — pure logic) over
// the rows (KvStore). The serving scheduler drives the ledger itself
// (blocks()); `run`, perplexity and the tests use the calls below, for which
// a full pool is an error (their pool is sized for their context).
#include <cstdint>
#include <vector>

#include "kernels/attention.h"
#include "kv/block_manager.h"
#include "kv/kv_layout.h"
#include "kv/kv_store.h"

namespace kestrel {

class PagedKvCache {
 public:
  // max_blocks_per_seq (0: n_blocks) sizes each block table once, so that
  // growing a sequence never allocates. sliding_blocks sizes the sliding
  // layers' pool (0: n_blocks; ignored without sliding layers).
  // state_slots: sequences whose recurrent state fits (a model with recurrent layers; else ignored).
  // memory: where the rows may live (Backend::kv_memory), else host memory.
  PagedKvCache(const KvLayout& layout, int n_blocks, int block_size, int max_blocks_per_seq = 0, int sliding_blocks = 0,
               int state_slots = 1, Backend* memory = nullptr);

  BlockManager& blocks() { return blocks_; }
  const BlockManager& blocks() const { return blocks_; }
  KvStore& store() { return store_; }
  const KvStore& store() const { return store_; }

  int block_size() const { return blocks_.block_size(); }
  int n_blocks() const { return blocks_.n_blocks(); }
  int n_free_blocks() const { return blocks_.n_free_blocks(); }
  int n_cached_blocks() const { return blocks_.n_cached_blocks(); }
  int64_t capacity_tokens() const { return static_cast<int64_t>(n_blocks()) * block_size(); }
  int n_used_blocks() const { return blocks_.n_used_blocks(); }
  int n_groups() const { return blocks_.n_groups(); }
  int group_of(int layer) const { return store_.group_of(layer); }
  int n_group_blocks(int group) const { return blocks_.n_group_blocks(group); }
  int n_group_free_blocks(int group) const { return blocks_.n_group_free_blocks(group); }
  int64_t held_blocks(int32_t seq, int group) const { return blocks_.held_blocks(seq, group); }
  int64_t bytes() const { return store_.bytes(); }

  // Makes room for positions [0, n_tokens) of seq; throws Error when the
  // pool is exhausted. In the engine only a Scheduler allocates (through the
  // ledger, blocks()); this is for model-level tests that run a model alone.
  void reserve(int32_t seq, int64_t n_tokens);
  void slide(int32_t seq, int64_t first) { blocks_.slide(seq, first); }
  // Drops positions >= n_tokens (rollback), copying a shared last block first.
  void truncate(int32_t seq, int64_t n_tokens);
  // Frees all of seq's blocks. The (empty) table is kept for the id's reuse.
  void remove(int32_t seq) { truncate(seq, 0); }
  // Frees all of seq's blocks and forgets the id (the server: one id per request).
  void erase(int32_t seq) { blocks_.erase(seq); }
  int64_t length(int32_t seq) const { return blocks_.length(seq); }

  int64_t share_prefix(int32_t seq, const int32_t* tokens, int64_t n, uint64_t root = 0) {
    return blocks_.share_prefix(seq, tokens, n, root);
  }
  void publish_prefix(int32_t seq, const int32_t* tokens, int64_t n_computed, uint64_t root = 0) {
    blocks_.publish_prefix(seq, tokens, n_computed, root);
  }
  const BlockManager::PrefixStats& prefix_stats() const { return blocks_.prefix_stats(); }
  // Carries out the ledger's lower-tier transfers (BlockManager::transfers) on the rows, in order: spills (rows
  // out to the RAM tier) and fills (a tier's entry into a block), and the persists too when `persists` (rows
  // written to the disk tier; after the block copies that write what they read).
  void move_tier_rows(bool persists);
  const int32_t* block_table(int32_t seq, int group = 0) const { return blocks_.block_table(seq, group); }
  int64_t slot(int32_t seq, int32_t pos, int group = 0) const { return blocks_.slot(seq, pos, group); }

  void write_k(int layer, int64_t slot, const float* x) { store_.write_k(layer, slot, x); }
  void write_v(int layer, int64_t slot, const float* x) { store_.write_v(layer, slot, x); }
  void read_k(int layer, int64_t slot, float* y) const { store_.read_k(layer, slot, y); }
  void read_v(int layer, int64_t slot, float* y) const { store_.read_v(layer, slot, y); }
  const KvLayout& layout() const { return store_.layout(); }
  PagedKvLayerView layer_view(int layer) const { return store_.layer_view(layer); }

 private:
  BlockManager blocks_;
  KvStore store_;
};

}  // namespace kestrel

#pragma once
// The KV ledger, as pure logic: which blocks each sequence holds, reference
// counts, prefix names and the least-recently-freed order. No rows: the
// KvStore holds those; when a shared block must be copied before a write,
// the manager says which, and the store copies the rows.
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
//
// A full pool is an answer, not an exception: allocate() and truncate()
// return false and leave the ledger as it was (the scheduler decides whom
// to preempt). Exceptions are for misuse (an unknown sequence, a position
// outside what it holds, a rollback into released sliding blocks).
#include <array>
#include <cstdint>
#include <list>
#include <map>
#include <optional>
#include <vector>

#include "kv/block_name_index.h"
#include "kv/prefix_tiers.h"

namespace kestrel {

// Rows a KvStore must copy: all layers of `group`, block `from` to block `to`.
struct BlockCopy {
  int group = 0;
  int32_t from = 0, to = 0;
};
// A recurrent state a KvStore must copy (linear-attention models' prefix caching): a sequence's live state
// (in its state slot) saved as a prefix snapshot, or a snapshot restored into a sequence's live state; `pos`
// the positions the state has consumed.
// With lower tiers, a restore may come from a tier's entry (blob) instead of a snapshot.
struct StateCopy {
  bool save = true;
  int32_t slot = -1, snapshot = -1;
  int64_t pos = 0;
  PrefixTiers::Blob blob;
};
// Rows moving between the pool and the lower tiers (kv/prefix_tiers.h), in the order the ledger decided them:
// a named block (or snapshot) about to be reused, copied out to RAM first (Spill); a tier's entry copied into
// a block a prefix hit took (Fill); a block (or snapshot) just computed, written to disk (Persist). `index`:
// the block in its kind's group, or the snapshot.
struct TierTransfer {
  enum class Op : uint8_t { Spill, Fill, Persist };
  Op op = Op::Spill;
  TierKind kind = TierKind::Full;
  int32_t index = 0;
  uint64_t name = 0;
  PrefixTiers::Blob blob;  // Fill
};
struct BlockCopies {
  std::array<BlockCopy, 2> at{};  // at most one per group
  int n = 0;
  bool has_state = false;  // and a state copy
  StateCopy state;
};

class BlockManager {
 public:
  // sliding_window > 0 adds the sliding group of sliding_blocks blocks (0:
  // n_blocks). max_blocks_per_seq (0: n_blocks) sizes each block table once,
  // so that growing a sequence never allocates.
  // state_slots > 0: the model has recurrent layers (linear attention), whose per-sequence state does not
  // grow with the context: each sequence holding anything also holds one of these slots, taken by its first
  // allocate() and freed by erase() (a full pool of slots is a full pool: allocate() says no).
  BlockManager(int n_blocks, int block_size, int max_blocks_per_seq = 0, int32_t sliding_window = 0,
               int sliding_blocks = 0, int state_slots = 0);

  int block_size() const { return block_size_; }
  // Counts of the full-attention group's pool (what limits the context).
  int n_blocks() const { return groups_[0].n_blocks; }
  // Blocks an allocation can take: never used, or cached but held by nobody.
  int n_free_blocks() const { return groups_[0].n_free(); }
  int n_cached_blocks() const { return static_cast<int>(groups_[0].evictable.size()); }
  int n_used_blocks() const { return n_blocks() - n_free_blocks(); }
  int n_groups() const { return static_cast<int>(groups_.size()); }
  int n_group_blocks(int group) const { return groups_[group].n_blocks; }
  int n_group_free_blocks(int group) const { return groups_[group].n_free(); }
  int max_blocks_per_seq() const { return max_blocks_per_seq_; }
  int n_state_slots() const { return n_state_slots_; }
  int n_free_state_slots() const { return static_cast<int>(free_states_.size()); }
  // The recurrent-state slot seq holds (-1: none, or a model without recurrent layers).
  int32_t state_slot(int32_t seq) const;
  // Blocks needed to hold n tokens.
  int64_t blocks_for(int64_t n_tokens) const { return (n_tokens + block_size_ - 1) / block_size_; }
  // Blocks seq holds in a group (released sliding blocks not counted).
  int64_t held_blocks(int32_t seq, int group = 0) const;
  int64_t length(int32_t seq) const;  // positions allocated

  // Whether seq can grow to hold positions [0, n_tokens) now.
  bool can_allocate(int32_t seq, int64_t n_tokens) const;
  // Grows seq to hold [0, n_tokens); false (nothing taken) when the pool or
  // the per-sequence table is too small.
  bool allocate(int32_t seq, int64_t n_tokens);
  // No query of seq will come before position `first` again: the sliding
  // group releases the blocks wholly outside that query's window.
  void slide(int32_t seq, int64_t first);
  // Drops positions >= n_tokens (rollback); frees blocks no longer needed. A
  // partly kept shared last block is replaced by a private copy, listed in
  // `copies` for the store. False when no block is free for that copy (the
  // positions are dropped; the sequence must be erased before it is written).
  bool truncate(int32_t seq, int64_t n_tokens, BlockCopies& copies);
  // Frees all of seq's blocks and forgets the id.
  void erase(int32_t seq);

  // For an empty sequence about to run tokens[0, n): attaches the longest
  // run of cached full blocks matching its prefix, leaving at least the last
  // token to compute (its logits are needed). Returns the tokens covered.
  // With recurrent-state slots the run must also end at a block whose state snapshot is kept (save_snapshot);
  // the sequence's first allocate() then takes its slot, and take_state_restore() says what to copy into it.
  // root: what names the chain's first block besides its tokens (0: plain; a LoRA adapter set's key, so that KV
  // computed under adapters is found only under the same ones).
  int64_t share_prefix(int32_t seq, const int32_t* tokens, int64_t n, uint64_t root = 0);
  // Names seq's full blocks within its first n_computed tokens (whose KV is
  // written) so that later sequences can share them.
  void publish_prefix(int32_t seq, const int32_t* tokens, int64_t n_computed, uint64_t root = 0);
  // Recurrent state: once seq's published blocks end exactly at n_computed (its state is there), a snapshot of
  // it under the last block's name (the least recently used snapshot's place; nothing when that name has one).
  std::optional<StateCopy> save_snapshot(int32_t seq, int64_t n_computed);
  // The snapshot copy a prefix hit of share_prefix needs, once seq holds its state slot (then forgotten).
  std::optional<StateCopy> take_state_restore(int32_t seq);
  int n_snapshots() const { return static_cast<int>(snap_name_.size()); }

  // ---- Lower tiers (kv/prefix_tiers.h) ----
  // With tiers, a named block the pool reuses is spilled to RAM first, a computed block is persisted to disk,
  // and share_prefix() goes on past the pool's run with the tiers' entries (each into a block of its own).
  // entry_bytes: what each kind's entry takes (KvStore::entry_bytes).
  void set_tiers(PrefixTiers* tiers, const std::array<int64_t, 3>& entry_bytes);
  PrefixTiers* tiers() const { return tiers_; }
  // What the ledger decided since the last clear, in order; the KvStore and tiers carry it out
  // (StepExecutor): spills and fills before the step's block copies, persists after them.
  std::vector<TierTransfer>& transfers() { return transfers_; }
  // Keeps seq's full blocks within its first n_tokens (and the snapshot at their end) in the RAM tier until
  // until_s; returns the entries pinned (from the first block on, until the pinned share of the tier is reached).
  int64_t pin_prefix(int32_t seq, int64_t n_tokens, double until_s);
  // The names of seq's leading full blocks known so far (shared or published), and the recurrent state a
  // prefix hit of share_prefix() would restore (a snapshot or a tier's entry; none: no state, or no hit).
  const std::vector<uint64_t>& prefix_names(int32_t seq) const { return seq_or_throw(seq).names; }
  std::optional<StateCopy> prefix_state(int32_t seq) const;
  struct TierHits {
    int64_t blocks = 0;  // prefix blocks share_prefix() took from the tiers
  };
  const TierHits& tier_hits() const { return tier_hits_; }
  struct PrefixStats {
    int64_t queried_blocks = 0, hit_blocks = 0;  // full prompt blocks that could have been found / were
  };
  const PrefixStats& prefix_stats() const { return stats_; }

  // A sequence's block table in a group (released sliding blocks are -1).
  const int32_t* block_table(int32_t seq, int group = 0) const;
  // The slot of a position in a group's pool (block * block_size + offset).
  int64_t slot(int32_t seq, int32_t pos, int group = 0) const;

 private:
  struct BlockState {
    int32_t refs = 0;
    bool named = false;
    uint64_t name = 0;
    std::list<int32_t>::iterator lru;  // position in evictable when refs == 0 and named
  };
  // One pool of blocks.
  struct Group {
    int n_blocks = 0;
    std::vector<int32_t> free;     // never named, held by nobody
    std::list<int32_t> evictable;  // named, held by nobody: oldest first
    std::vector<BlockState> state;
    BlockNameIndex by_name;
    int n_free() const { return static_cast<int>(free.size() + evictable.size()); }
  };
  struct Sequence {
    std::vector<int32_t> blocks[2];  // per group; -1: a released sliding block
    int64_t length = 0;
    int64_t released = 0;         // sliding blocks [0, released) are -1
    std::vector<uint64_t> names;  // names of the leading blocks known so far (shared or published)
    int32_t state = -1;           // its recurrent-state slot
    int32_t restore = -1;         // a prefix hit's snapshot to restore into it
    PrefixTiers::Blob restore_blob;  // ...or a tier's entry
    int64_t restore_pos = 0;      // ...and the positions it holds
  };
  const Sequence& seq_or_throw(int32_t seq) const;
  Sequence& new_or_existing(int32_t seq);
  int32_t take_block(int g);                 // a never-used block, else the least recently freed cached one
  void release_block(int g, int32_t block);  // one holder fewer
  void forget_name(int g, int32_t block);
  bool name_block(int g, int32_t block, uint64_t name);  // false: the name has a block already
  // Blocks seq needs in the sliding group for a query at `pos`: from this index.
  int64_t first_window_block(int64_t pos) const;

  int block_size_;
  int max_blocks_per_seq_;
  int32_t sliding_window_;
  std::vector<Group> groups_;
  std::map<int32_t, Sequence> seqs_;
  int n_state_slots_ = 0;
  std::vector<int32_t> free_states_;
  // Prefix snapshots of recurrent state (as many as state slots): each one's block name and last use.
  std::vector<uint64_t> snap_name_;
  std::vector<int64_t> snap_used_;  // 0: empty
  int64_t snap_clock_ = 0;
  int32_t snapshot_of(uint64_t name) const;
  PrefixStats stats_;
  PrefixTiers* tiers_ = nullptr;
  std::array<int64_t, 3> entry_bytes_{};
  std::vector<TierTransfer> transfers_;
  TierHits tier_hits_;
  std::vector<PrefixTiers::Blob> found_[2];  // share_prefix's scratch: per block, a tier's entry (or null)
  std::vector<uint8_t> asked_;               // ...and whether the sliding group's tier was asked for it
  static TierKind kind_of(int group) { return group == 0 ? TierKind::Full : TierKind::Sliding; }
};

}  // namespace kestrel

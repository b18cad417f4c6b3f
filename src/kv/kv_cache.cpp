#include "kv/kv_cache.h"

#include <fmt/format.h>

#include "core/error.h"

namespace kestrel {

namespace {
int32_t sliding_window_of(const KvLayout& layout) { return layout.n_sliding() > 0 ? layout.sliding_window : 0; }
}  // namespace

PagedKvCache::PagedKvCache(const KvLayout& layout, int n_blocks, int block_size, int max_blocks_per_seq,
                           int sliding_blocks, int state_slots, Backend* memory)
    : blocks_(n_blocks, block_size, max_blocks_per_seq, sliding_window_of(layout), sliding_blocks,
              layout.n_recurrent > 0 ? state_slots : 0),
      store_(layout,
             blocks_.n_groups() > 1 ? std::vector<int>{blocks_.n_group_blocks(0), blocks_.n_group_blocks(1)}
                                    : std::vector<int>{blocks_.n_group_blocks(0)},
             block_size, blocks_.n_state_slots(), memory) {}

void PagedKvCache::reserve(int32_t seq, int64_t n_tokens) {
  if (blocks_.allocate(seq, n_tokens)) return;
  const int64_t need = blocks_.blocks_for(n_tokens);
  const int64_t extra = need - blocks_.held_blocks(seq, 0);
  for (int g = 0; g < n_groups(); g++)
    if (extra > blocks_.n_group_free_blocks(g))
      throw Error(fmt::format("KV cache full: sequence {} needs {} tokens ({} more blocks) but only {} of {} {}blocks "
                              "are free",
                              seq, n_tokens, extra, blocks_.n_group_free_blocks(g), blocks_.n_group_blocks(g),
                              g ? "sliding-window " : ""));
  if (need > blocks_.max_blocks_per_seq())
    throw Error(fmt::format("KV cache: sequence {} needs {} blocks, more than the {} a sequence may hold", seq, need,
                            blocks_.max_blocks_per_seq()));
  throw Error(fmt::format("KV cache: sequence {} cannot grow to {} tokens", seq, n_tokens));
}

void PagedKvCache::truncate(int32_t seq, int64_t n_tokens) {
  BlockCopies copies;
  const bool ok = blocks_.truncate(seq, n_tokens, copies);
  store_.copy(copies);
  if (!ok) throw Error(fmt::format("KV cache full: cannot copy a shared block of sequence {}", seq));
}

void PagedKvCache::move_tier_rows(bool persists) {
  PrefixTiers* tiers = blocks_.tiers();
  std::vector<TierTransfer>& list = blocks_.transfers();
  if (!tiers || list.empty()) return;
  size_t kept = 0;
  for (TierTransfer& t : list) {
    if (t.op == TierTransfer::Op::Persist && !persists) {
      list[kept++] = std::move(t);
      continue;
    }
    if (t.op == TierTransfer::Op::Fill) {
      store_.load_block(t.kind, t.index, t.blob->data());
      continue;
    }
    std::vector<uint8_t> bytes(static_cast<size_t>(store_.entry_bytes(t.kind)));
    store_.save_entry(t.kind, t.index, bytes.data());
    if (t.op == TierTransfer::Op::Spill)
      tiers->put_ram(t.kind, t.name, std::move(bytes));
    else
      tiers->persist(t.kind, t.name, std::move(bytes));
  }
  list.resize(kept);
}

}  // namespace kestrel

// The KV ledger alone: no rows, no model. A full pool is an answer (false,
// nothing changed), copy-on-write is a list for the store.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "core/error.h"
#include "kv/block_manager.h"

namespace kestrel {
namespace {

std::vector<int32_t> iota_tokens(int n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), 100);
  return t;
}

TEST(BlockManager, AFullPoolSaysNoAndChangesNothing) {
  BlockManager m(4, 4);
  ASSERT_TRUE(m.allocate(1, 9));  // 3 blocks
  EXPECT_EQ(m.n_free_blocks(), 1);
  EXPECT_FALSE(m.can_allocate(2, 5));
  EXPECT_FALSE(m.allocate(2, 5));  // 2 blocks, 1 free
  EXPECT_EQ(m.n_free_blocks(), 1);
  EXPECT_EQ(m.length(2), 0);
  EXPECT_TRUE(m.allocate(1, 12));  // grows within its last block's room... and the free one
  EXPECT_EQ(m.length(1), 12);
  EXPECT_FALSE(m.allocate(1, 17));  // a fifth block: none
  EXPECT_EQ(m.length(1), 12);
  m.erase(1);
  EXPECT_EQ(m.n_free_blocks(), 4);
  EXPECT_TRUE(m.allocate(2, 5));
  EXPECT_THROW(m.slot(3, 0), Error);       // unknown sequence: misuse, not a full pool
  EXPECT_THROW(m.slot(2, 5), Error);       // outside what it holds
}

TEST(BlockManager, ASequenceNeverHoldsMoreThanItsTable) {
  BlockManager m(8, 4, 2);
  EXPECT_TRUE(m.allocate(1, 8));
  EXPECT_FALSE(m.can_allocate(1, 9));
  EXPECT_FALSE(m.allocate(1, 9));
  EXPECT_EQ(m.n_free_blocks(), 6);
}

TEST(BlockManager, TruncatingIntoASharedBlockListsACopyAndKeepsTheOtherHolders) {
  BlockManager m(6, 4);
  const auto t = iota_tokens(12);
  ASSERT_TRUE(m.allocate(1, 12));
  m.publish_prefix(1, t.data(), 12);
  const int32_t shared_second = m.block_table(1)[1];
  EXPECT_EQ(m.share_prefix(2, t.data(), 12), 8);  // two full blocks, the last token left to compute
  EXPECT_EQ(m.block_table(2)[1], shared_second);
  BlockCopies copies;
  ASSERT_TRUE(m.truncate(2, 6, copies));  // into block 1, which sequence 1 holds too
  ASSERT_EQ(copies.n, 1);
  EXPECT_EQ(copies.at[0].group, 0);
  EXPECT_EQ(copies.at[0].from, shared_second);
  EXPECT_EQ(copies.at[0].to, m.block_table(2)[1]);
  EXPECT_NE(m.block_table(2)[1], shared_second);
  EXPECT_EQ(m.block_table(1)[1], shared_second);

  ASSERT_TRUE(m.truncate(1, 5, copies));  // block 1 is now its alone: no copy
  EXPECT_EQ(copies.n, 0);
}

TEST(BlockManager, NoBlockForTheCopyIsAnAnswerToo) {
  BlockManager m(3, 4);
  const auto t = iota_tokens(8);
  ASSERT_TRUE(m.allocate(1, 8));
  m.publish_prefix(1, t.data(), 8);
  EXPECT_EQ(m.share_prefix(2, t.data(), 9), 8);
  ASSERT_TRUE(m.allocate(2, 9));  // the third block
  EXPECT_EQ(m.n_free_blocks(), 0);
  BlockCopies copies;
  // Back into the shared second block, with the third given back first: that one is the copy.
  ASSERT_TRUE(m.truncate(2, 7, copies));
  EXPECT_EQ(copies.n, 1);
  EXPECT_EQ(m.n_free_blocks(), 0);
  BlockManager full(2, 4);
  ASSERT_TRUE(full.allocate(1, 8));
  full.publish_prefix(1, t.data(), 8);
  EXPECT_EQ(full.share_prefix(2, t.data(), 9), 8);
  EXPECT_FALSE(full.truncate(2, 7, copies));  // nothing free for the copy
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {

// Recurrent-state slots (linear-attention models): one per sequence holding anything, whatever its length;
// the pool of slots runs out like the pool of blocks (an answer, nothing changed); a prefix is shared only up
// to a block whose state snapshot is kept.
TEST(BlockManager, RecurrentStateSlotsAreHeldPerSequence) {
  BlockManager m(100, 4, 0, 0, 0, /*state_slots=*/2);
  EXPECT_EQ(m.n_state_slots(), 2);
  EXPECT_EQ(m.state_slot(1), -1);
  ASSERT_TRUE(m.allocate(1, 3));
  ASSERT_TRUE(m.allocate(2, 50));
  EXPECT_NE(m.state_slot(1), m.state_slot(2));
  EXPECT_EQ(m.n_free_state_slots(), 0);
  ASSERT_TRUE(m.allocate(1, 40));  // growing keeps its slot
  EXPECT_FALSE(m.can_allocate(3, 1));
  EXPECT_FALSE(m.allocate(3, 1));  // blocks are free, slots are not
  EXPECT_EQ(m.length(3), 0);
  EXPECT_EQ(m.n_free_blocks(), 100 - 10 - 13);
  const int32_t freed = m.state_slot(1);
  m.erase(1);
  EXPECT_EQ(m.n_free_state_slots(), 1);
  ASSERT_TRUE(m.allocate(3, 1));
  EXPECT_EQ(m.state_slot(3), freed);
  // Published blocks without a snapshot give no state: nothing is shared.
  std::vector<int32_t> toks(60);
  std::iota(toks.begin(), toks.end(), 5);
  m.publish_prefix(2, toks.data(), 48);
  m.erase(3);
  EXPECT_EQ(m.share_prefix(4, toks.data(), 60), 0);
  m.erase(4);
  // A snapshot at 32 (the state sits at a block's end): a later prompt shares 32 positions and is told to
  // restore that snapshot into its own slot once it holds one. A position off a block's end takes none.
  EXPECT_FALSE(m.save_snapshot(2, 30));  // off a block's end
  EXPECT_FALSE(m.save_snapshot(2, 32));  // its published blocks end at 48, not there
  BlockCopies none;
  ASSERT_TRUE(m.truncate(2, 32, none));
  const auto at32 = m.save_snapshot(2, 32);
  ASSERT_TRUE(at32);
  EXPECT_TRUE(at32->save);
  EXPECT_EQ(at32->slot, m.state_slot(2));
  EXPECT_EQ(at32->pos, 32);
  EXPECT_FALSE(m.save_snapshot(2, 32));  // kept already
  EXPECT_EQ(m.share_prefix(5, toks.data(), 60), 32);
  EXPECT_FALSE(m.take_state_restore(5));  // no slot yet
  ASSERT_TRUE(m.allocate(5, 60));
  const auto restore = m.take_state_restore(5);
  ASSERT_TRUE(restore);
  EXPECT_FALSE(restore->save);
  EXPECT_EQ(restore->snapshot, at32->snapshot);
  EXPECT_EQ(restore->slot, m.state_slot(5));
  EXPECT_EQ(restore->pos, 32);
  EXPECT_FALSE(m.take_state_restore(5));  // once
}

}  // namespace
}  // namespace kestrel

// The paged KV cache's block accounting, without any model.
#include <gmock/gmock.h>
#include <unistd.h>

#include <fstream>

#include "core/error.h"
#include "kv/kv_cache.h"

namespace kestrel {
namespace {

// Element 0 of a slot's key (or value) row, written and read through the cache's own format.
void put_k(PagedKvCache& kv, int64_t slot, float x) {
  std::vector<float> row(static_cast<size_t>(kv.layout().k_width), 0.0f);
  row[0] = x;
  kv.write_k(0, slot, row.data());
}
void put_v(PagedKvCache& kv, int64_t slot, float x) {
  std::vector<float> row(static_cast<size_t>(kv.layout().v_width), 0.0f);
  row[0] = x;
  kv.write_v(0, slot, row.data());
}
float get_k(const PagedKvCache& kv, int64_t slot) {
  std::vector<float> row(static_cast<size_t>(kv.layout().k_width));
  kv.read_k(0, slot, row.data());
  return row[0];
}

TEST(PagedKvCache, AllocatesBlocksOnDemandAndFreesThem) {
  PagedKvCache kv({2, 4, 4}, 8, 16);
  EXPECT_EQ(kv.n_free_blocks(), 8);
  kv.reserve(0, 1);
  EXPECT_EQ(kv.n_free_blocks(), 7);
  kv.reserve(0, 16);
  EXPECT_EQ(kv.n_free_blocks(), 7);
  kv.reserve(0, 17);
  EXPECT_EQ(kv.n_free_blocks(), 6);
  kv.reserve(1, 40);
  EXPECT_EQ(kv.n_free_blocks(), 3);
  EXPECT_EQ(kv.length(1), 40);
  kv.truncate(1, 16);  // rollback to one block
  EXPECT_EQ(kv.n_free_blocks(), 5);
  EXPECT_EQ(kv.length(1), 16);
  kv.remove(0);
  kv.remove(1);
  EXPECT_EQ(kv.n_free_blocks(), 8);
}

TEST(PagedKvCache, SlotsFollowTheBlockTable) {
  PagedKvCache kv({1, 2, 2}, 4, 4);
  kv.reserve(7, 3);   // seq 7 takes block 0
  kv.reserve(9, 5);   // seq 9 takes blocks 1, 2
  kv.reserve(7, 6);   // seq 7 grows into block 3
  EXPECT_EQ(kv.block_table(7)[0], 0);
  EXPECT_EQ(kv.block_table(7)[1], 3);
  EXPECT_EQ(kv.slot(7, 5), 3 * 4 + 1);
  EXPECT_EQ(kv.slot(9, 4), 2 * 4 + 0);
  // Writes through one sequence's slots never land in another's.
  put_k(kv, kv.slot(7, 5), 1.5f);
  EXPECT_EQ(get_k(kv, kv.slot(9, 4)), 0.0f);
  EXPECT_EQ(reinterpret_cast<const float*>(kv.layer_view(0).k)[kv.slot(7, 5) * 2], 1.5f);
}

TEST(PagedKvCache, ExhaustionAndBadPositionsAreClearErrors) {
  using ::testing::HasSubstr;
  PagedKvCache kv({1, 1, 1}, 2, 4);
  kv.reserve(0, 8);
  try {
    kv.reserve(1, 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("KV cache full"));
  }
  EXPECT_THROW(kv.slot(0, 8), Error);
  EXPECT_THROW(kv.slot(3, 0), Error);
  EXPECT_THROW(PagedKvCache({1, 1, 1}, 0, 4), Error);
}

// Prefix caching: full blocks named by their tokens (chained), shared by
// reference, kept findable after release until the pool needs them.
std::vector<int32_t> tokens(int n, int32_t first = 1) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; i++) t[i] = first + i;
  return t;
}

// Writes a recognisable value into every slot of seq's first n positions.
void fill(PagedKvCache& kv, int32_t seq, int64_t n, float base) {
  for (int64_t p = 0; p < n; p++) {
    put_k(kv, kv.slot(seq, static_cast<int32_t>(p)), base + static_cast<float>(p));
    put_v(kv, kv.slot(seq, static_cast<int32_t>(p)), -base - static_cast<float>(p));
  }
}

TEST(PagedKvCache, SequencesWithACommonPrefixShareItsFullBlocks) {
  PagedKvCache kv({1, 2, 2}, 10, 16);
  const auto a = tokens(40);
  EXPECT_EQ(kv.share_prefix(0, a.data(), 40), 0);  // nothing cached yet
  kv.reserve(0, 40);
  fill(kv, 0, 40, 100.0f);
  kv.publish_prefix(0, a.data(), 40);
  EXPECT_EQ(kv.n_free_blocks(), 7);

  // Same first 35 tokens, then different: the two full blocks (32 tokens) are shared.
  auto b = tokens(50);
  b[35] = 999;
  EXPECT_EQ(kv.share_prefix(1, b.data(), 50), 32);
  EXPECT_EQ(kv.length(1), 32);
  EXPECT_EQ(kv.block_table(1)[0], kv.block_table(0)[0]);
  EXPECT_EQ(kv.block_table(1)[1], kv.block_table(0)[1]);
  EXPECT_EQ(get_k(kv, kv.slot(1, 31)), 131.0f);  // sequence 0's values, not recomputed
  EXPECT_EQ(kv.n_free_blocks(), 7);              // no new blocks for the shared part
  kv.reserve(1, 50);
  EXPECT_NE(kv.block_table(1)[2], kv.block_table(0)[2]);
  EXPECT_EQ(kv.prefix_stats().hit_blocks, 2);
  // Queried: every full block each prompt could have found (2 of 40 tokens, 3 of 50), hit or not.
  EXPECT_EQ(kv.prefix_stats().queried_blocks, 2 + 3);

  // A different first block shares nothing, even if later blocks match.
  auto c = a;
  c[0] = 7;
  EXPECT_EQ(kv.share_prefix(2, c.data(), 40), 0);
  // The last token is always computed: a 32-token prompt reuses one block, not two.
  EXPECT_EQ(kv.share_prefix(3, a.data(), 32), 16);
}

TEST(PagedKvCache, ReleasedNamedBlocksStayFindableUntilThePoolNeedsThem) {
  PagedKvCache kv({1, 1, 1}, 4, 4);
  const auto a = tokens(9);
  kv.reserve(0, 9);
  fill(kv, 0, 9, 10.0f);
  kv.publish_prefix(0, a.data(), 9);
  kv.remove(0);
  EXPECT_EQ(kv.n_free_blocks(), 4);
  EXPECT_EQ(kv.n_cached_blocks(), 2);  // the two full blocks; the partial third is plain free
  EXPECT_EQ(kv.share_prefix(1, a.data(), 9), 8);
  EXPECT_EQ(get_k(kv, kv.slot(1, 7)), 17.0f);
  kv.remove(1);
  // Filling the whole pool with other sequences evicts them (oldest first), never fails.
  kv.reserve(2, 16);
  EXPECT_EQ(kv.n_cached_blocks(), 0);
  EXPECT_THROW(kv.reserve(3, 1), Error);
  kv.remove(2);
  EXPECT_EQ(kv.share_prefix(4, a.data(), 9), 0);  // gone
}

TEST(PagedKvCache, TruncatingIntoASharedBlockCopiesItFirst) {
  PagedKvCache kv({1, 1, 1}, 6, 4);
  const auto a = tokens(9);
  kv.reserve(0, 9);
  fill(kv, 0, 9, 50.0f);
  kv.publish_prefix(0, a.data(), 9);
  ASSERT_EQ(kv.share_prefix(1, a.data(), 9), 8);
  kv.truncate(1, 6);  // back into the second (shared) block, e.g. a rejected draft
  EXPECT_NE(kv.block_table(1)[1], kv.block_table(0)[1]);
  EXPECT_EQ(get_k(kv, kv.slot(1, 5)), 55.0f);  // the copy holds the same values
  kv.reserve(1, 8);
  put_k(kv, kv.slot(1, 6), -1.0f);            // writing the copy...
  EXPECT_EQ(get_k(kv, kv.slot(0, 6)), 56.0f);  // ...leaves sequence 0 untouched
  EXPECT_EQ(kv.block_table(1)[0], kv.block_table(0)[0]);  // the untouched first block is still shared
}

// Two layers: 0 attends over everything, 1 over the last 8 positions.
KvLayout sliding_layout() {
  KvLayout l{2, 4, 4, 4};
  l.sliding_window = 8;
  l.sliding = {0, 1};
  return l;
}

// Runs tokens [0, n) through the cache as a model's batches would: slide to
// each batch's first position, then reserve it.
void feed(PagedKvCache& kv, int32_t seq, int64_t from, int64_t n, int64_t batch) {
  for (int64_t p = from; p < n; p += batch) {
    kv.slide(seq, p);
    kv.reserve(seq, std::min(n, p + batch));
  }
}

TEST(PagedKvCache, SlidingLayersReleaseWhatLeftTheWindow) {
  PagedKvCache kv(sliding_layout(), 64, 4, 0, 16);
  ASSERT_EQ(kv.n_groups(), 2);
  EXPECT_EQ(kv.group_of(0), 0);
  EXPECT_EQ(kv.group_of(1), 1);
  feed(kv, 0, 0, 100, 2);
  EXPECT_EQ(kv.held_blocks(0, 0), 25);  // every position
  // The next query (position 98's batch started at 98) sees positions 91..98: blocks 22..24.
  EXPECT_EQ(kv.held_blocks(0, 1), 3);
  EXPECT_EQ(kv.block_table(0, 1)[10], -1);
  EXPECT_THROW(kv.slot(0, 40, 1), Error);  // left the window
  EXPECT_NO_THROW(kv.slot(0, 95, 1));
  EXPECT_NO_THROW(kv.slot(0, 40, 0));
  // Rolling back within the last batch is fine; into released blocks is an error.
  kv.truncate(0, 99);
  EXPECT_THROW(kv.truncate(0, 50), Error);
  kv.remove(0);
  EXPECT_EQ(kv.n_group_free_blocks(1), 16);
  EXPECT_EQ(kv.n_free_blocks(), 64);
}

TEST(PagedKvCache, SlidingPoolLimitsItsOwnGroup) {
  PagedKvCache kv(sliding_layout(), 64, 4, 0, 4);
  feed(kv, 0, 0, 40, 4);  // holds at most 3 sliding blocks
  EXPECT_THROW(kv.reserve(1, 8), Error);  // two more sliding blocks do not fit
  try {
    kv.reserve(1, 8);
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("sliding-window blocks"));
  }
}

TEST(PagedKvCache, SharedPrefixesBringTheWindowOfTheSlidingLayers) {
  PagedKvCache kv(sliding_layout(), 64, 4, 0, 32);
  std::vector<int32_t> tokens(40);
  for (int i = 0; i < 40; i++) tokens[i] = 100 + i;
  feed(kv, 0, 0, 40, 40);  // one batch: nothing released before it
  kv.publish_prefix(0, tokens.data(), 40);
  kv.slide(0, 39);         // a decode step at 39 sees 32..39: blocks 0..7 leave (freed, still named)
  EXPECT_EQ(kv.held_blocks(0, 1), 2);
  // Another sequence with the same prompt shares 9 full blocks (36 tokens,
  // the last token is always computed): its sliding table starts at the
  // window of position 36 (29..36, blocks 7 and 8), found by name.
  EXPECT_EQ(kv.share_prefix(1, tokens.data(), 40), 36);
  EXPECT_EQ(kv.block_table(1, 1)[6], -1);
  EXPECT_GE(kv.block_table(1, 1)[7], 0);
  EXPECT_EQ(kv.block_table(1, 1)[8], kv.block_table(0, 1)[8]);
  EXPECT_EQ(kv.block_table(1, 0)[0], kv.block_table(0, 0)[0]);
  EXPECT_EQ(kv.held_blocks(1, 1), 2);

  // When the window's sliding blocks were evicted, the full layers' blocks
  // alone are no use: nothing is shared (and nothing is held).
  PagedKvCache small(sliding_layout(), 64, 4, 0, 12);
  for (int64_t p = 0; p < 40; p += 4) {  // as the server does: publish after every step
    small.slide(0, p);
    small.reserve(0, p + 4);
    small.publish_prefix(0, tokens.data(), p + 4);
  }
  small.erase(0);  // sliding blocks cached, oldest first: 0..6 (left the window), then 9, 8, 7
  feed(small, 2, 0, 44, 44);  // 11 sliding blocks: the 2 never used, then 0..6, 9, 8
  small.erase(2);
  const int free_full = small.n_free_blocks();
  EXPECT_EQ(small.share_prefix(3, tokens.data(), 40), 0);
  EXPECT_EQ(small.n_free_blocks(), free_full);
  EXPECT_EQ(small.held_blocks(3, 0), 0);
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {

int64_t resident_bytes() {  // this process's resident set (/proc/self/statm: pages)
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// A pool sized for a long context costs memory only for the blocks written:
// 1 GiB of keys and values (2 layers x 65536 slots x 2 KiB rows each) adds
// little to the resident set until rows are written, and reads as zeros.
TEST(PagedKvCache, ThePoolIsCommittedWhereItIsWrittenOnly) {
  const int64_t before = resident_bytes();
  PagedKvCache kv({2, 512, 512}, 4096, 16);  // 4096 blocks of 16 slots, f32 rows of 512
  ASSERT_EQ(kv.store().bytes(), int64_t{2} * 2 * 65536 * 2048);
  EXPECT_LT(resident_bytes() - before, int64_t{64} << 20);
  EXPECT_EQ(get_k(kv, 65535), 0.0f);
  for (int64_t slot = 0; slot < 64; slot++) put_k(kv, slot * 1024, static_cast<float>(slot + 1));
  for (int64_t slot = 0; slot < 64; slot++) EXPECT_EQ(get_k(kv, slot * 1024), static_cast<float>(slot + 1));
  EXPECT_LT(resident_bytes() - before, int64_t{256} << 20);  // 64 rows touched: at most 64 huge pages
}

}  // namespace
}  // namespace kestrel

// The paged KV cache's block accounting, without any model.
#include <gmock/gmock.h>

#include "core/error.h"
#include "runtime/kv_cache.h"

namespace kestrel {
namespace {

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
  *kv.k(0, kv.slot(7, 5)) = 1.5f;
  EXPECT_EQ(*kv.k(0, kv.slot(9, 4)), 0.0f);
  EXPECT_EQ(kv.layer_view(0).k[kv.slot(7, 5) * 2], 1.5f);
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

}  // namespace
}  // namespace kestrel

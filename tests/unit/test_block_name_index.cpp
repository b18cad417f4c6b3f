// The prefix-name index of the KV ledger against std::unordered_map, over
// random inserts and erases that wrap around the table and collide.
#include <gtest/gtest.h>

#include <random>
#include <unordered_map>

#include "kv/block_name_index.h"

namespace kestrel {
namespace {

TEST(BlockNameIndex, AgreesWithAHashMapThroughInsertsAndErases) {
  const int n_blocks = 40;
  BlockNameIndex index(n_blocks);
  std::unordered_map<uint64_t, int32_t> oracle;
  std::mt19937_64 rng(5);
  // Few distinct low bits: long probe runs that wrap past the table's end.
  auto random_name = [&] { return (rng() % 24) * 64 + 60 + (rng() % 3) * 0x1000000000ull; };
  for (int step = 0; step < 20000; step++) {
    const uint64_t name = random_name();
    if (rng() % 2 && static_cast<int>(oracle.size()) < n_blocks) {
      const int32_t block = static_cast<int32_t>(rng() % n_blocks);
      const bool inserted = oracle.emplace(name, block).second;
      ASSERT_EQ(index.insert(name, block), inserted) << "step " << step;
    } else {
      auto it = oracle.find(name);
      const int32_t block = it != oracle.end() && rng() % 4 ? it->second : static_cast<int32_t>(rng() % n_blocks);
      if (it != oracle.end() && it->second == block) oracle.erase(it);
      index.erase(name, block);
    }
    ASSERT_EQ(index.size(), static_cast<int>(oracle.size())) << "step " << step;
    for (uint64_t probe = 0; probe < 24; probe++)
      for (uint64_t hi = 0; hi < 3; hi++) {
        const uint64_t n = probe * 64 + 60 + hi * 0x1000000000ull;
        auto it = oracle.find(n);
        ASSERT_EQ(index.find(n), it == oracle.end() ? -1 : it->second) << "step " << step << " name " << n;
      }
  }
}

TEST(BlockNameIndex, ANameIsTakenOnceAndEraseNeedsItsBlock) {
  BlockNameIndex index(4);
  EXPECT_TRUE(index.insert(7, 1));
  EXPECT_FALSE(index.insert(7, 2));  // the first owner keeps it
  EXPECT_EQ(index.find(7), 1);
  index.erase(7, 2);                 // not its block: nothing happens
  EXPECT_EQ(index.find(7), 1);
  index.erase(7, 1);
  EXPECT_EQ(index.find(7), -1);
  EXPECT_EQ(index.size(), 0);
}

}  // namespace
}  // namespace kestrel

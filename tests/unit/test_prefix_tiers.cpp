// The prefix cache's lower tiers (kv/prefix_tiers.h) alone, and the KV ledger with them: sizes never passed,
// LRU and pins, entries found again by a new instance on the same folder (a restart), bad files detected and
// dropped, and the spills, fills and persists the ledger asks of the store.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <thread>

#include "core/error.h"
#include "kv/block_manager.h"
#include "kv/kv_cache.h"
#include "kv/prefix_tiers.h"
#include "test_support.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> bytes_of(uint64_t seed, size_t n) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

int64_t folder_bytes(const std::string& folder) {
  int64_t n = 0;
  for (const auto& e : fs::directory_iterator(folder))
    if (e.path().extension() == ".kvb") n += static_cast<int64_t>(e.file_size());
  return n;
}

std::vector<std::string> entry_files(const std::string& folder) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(folder))
    if (e.path().extension() == ".kvb") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(PrefixTiers, TheRamTierNeverPassesItsLimitAndDropsTheLeastRecentlyUsed) {
  PrefixTierConfig c;
  c.ram_bytes = 10 * 1000;
  PrefixTiers t(c);
  for (uint64_t n = 1; n <= 30; n++) {
    ASSERT_TRUE(t.wants_spill(TierKind::Full, n));
    t.put_ram(TierKind::Full, n, bytes_of(n, 1000));
    EXPECT_LE(t.stats().ram.bytes, c.ram_bytes);
    if (n == 5) {
      ASSERT_NE(t.fetch(TierKind::Full, 1, 1000), nullptr);  // 1 becomes the most recently used
    }
  }
  const auto s = t.stats();
  EXPECT_EQ(s.ram.entries, 10);
  EXPECT_EQ(s.ram.evictions, 20);
  EXPECT_EQ(t.fetch(TierKind::Full, 2, 1000), nullptr);  // evicted long ago
  EXPECT_EQ(t.fetch(TierKind::Full, 1, 1000), nullptr);  // ...and 1 too, 25 puts later: LRU, not forever
  const auto b = t.fetch(TierKind::Full, 30, 1000);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(*b, bytes_of(30, 1000));
  EXPECT_EQ(t.fetch(TierKind::Sliding, 30, 1000), nullptr);  // another kind is another key
  EXPECT_EQ(t.fetch(TierKind::Full, 30, 999), nullptr);      // another size is another layout's: dropped
  t.put_ram(TierKind::Full, 99, bytes_of(99, 20000));        // larger than the tier: not taken
  EXPECT_EQ(t.stats().ram.dropped, 1);
  EXPECT_LE(t.stats().ram.bytes, c.ram_bytes);
}

TEST(PrefixTiers, PinnedEntriesStayWhileOthersGoAndPinsHaveAShare) {
  PrefixTierConfig c;
  c.ram_bytes = 8 * 1000;
  PrefixTiers t(c);
  const double later = PrefixTiers::now_s() + 3600;
  t.put_ram(TierKind::Full, 1, bytes_of(1, 1000));
  ASSERT_TRUE(t.pin(TierKind::Full, 1, later, 1000));
  ASSERT_TRUE(t.pin(TierKind::Full, 2, later, 1000));  // before it reaches RAM
  ASSERT_TRUE(t.pin(TierKind::Full, 3, later, 1000));
  ASSERT_TRUE(t.pin(TierKind::Full, 4, later, 1000));
  EXPECT_FALSE(t.pin(TierKind::Full, 5, later, 1000));  // half the tier at most
  t.put_ram(TierKind::Full, 2, bytes_of(2, 1000));
  for (uint64_t n = 10; n < 40; n++) t.put_ram(TierKind::Full, n, bytes_of(n, 1000));
  EXPECT_NE(t.fetch(TierKind::Full, 1, 1000), nullptr);
  EXPECT_NE(t.fetch(TierKind::Full, 2, 1000), nullptr);
  EXPECT_EQ(t.fetch(TierKind::Full, 10, 1000), nullptr);
  const auto s = t.stats(true);
  EXPECT_EQ(s.pinned_entries, 2);
  EXPECT_LE(s.ram.bytes, c.ram_bytes);
  // A prompt's blocks pinned at once: in order, until the share is reached (here it already is).
  PrefixTiers v(c);
  std::vector<PrefixTiers::PinKey> keys;
  for (uint64_t n = 100; n < 110; n++) keys.push_back({TierKind::Full, n, 1000});
  EXPECT_EQ(v.pin(keys, later), 4);
  EXPECT_EQ(v.pin(keys, later + 60), 4);  // the same four again: longer, no more room taken
  for (uint64_t n = 100; n < 110; n++) v.put_ram(TierKind::Full, n, bytes_of(n, 1000));
  for (uint64_t n = 200; n < 230; n++) v.put_ram(TierKind::Full, n, bytes_of(n, 1000));
  for (uint64_t n = 100; n < 104; n++) EXPECT_NE(v.fetch(TierKind::Full, n, 1000), nullptr) << n;
  EXPECT_EQ(v.fetch(TierKind::Full, 104, 1000), nullptr);
  EXPECT_EQ(v.stats(true).pinned_entries, 4);
  // An expired pin is an ordinary entry again.
  PrefixTiers u(c);
  u.put_ram(TierKind::Full, 1, bytes_of(1, 1000));
  ASSERT_TRUE(u.pin(TierKind::Full, 1, PrefixTiers::now_s() - 1, 1000));
  for (uint64_t n = 10; n < 20; n++) u.put_ram(TierKind::Full, n, bytes_of(n, 1000));
  EXPECT_EQ(u.fetch(TierKind::Full, 1, 1000), nullptr);
}

TEST(PrefixTiers, TheDiskTierSurvivesARestartAndKeepsItsLimit) {
  test::TempDir dir;
  PrefixTierConfig c;
  c.disk_dir = dir.file("cache");
  c.disk_bytes = 20 * (1000 + 48);  // 20 entries of 1000 bytes and their headers
  c.identity = "model A";
  std::string folder;
  {
    PrefixTiers t(c);
    folder = t.folder();
    for (uint64_t n = 1; n <= 50; n++) {
      ASSERT_TRUE(t.wants_persist(TierKind::Full, n));
      t.persist(TierKind::Full, n, bytes_of(n, 1000));
      if (n % 7 == 0) {
        t.flush();
        EXPECT_LE(folder_bytes(folder), c.disk_bytes);
      }
    }
    t.persist(TierKind::State, 7, bytes_of(700, 500));
    t.flush();
    const auto s = t.stats();
    EXPECT_LE(s.disk.bytes, c.disk_bytes);
    EXPECT_EQ(s.disk.bytes, folder_bytes(folder));
    EXPECT_EQ(s.disk.writes, 51);
    EXPECT_FALSE(t.wants_persist(TierKind::State, 7));
  }
  {
    PrefixTiers again(c);  // a restart on the same folder
    EXPECT_EQ(again.folder(), folder);
    const auto s = again.stats();
    EXPECT_EQ(s.disk.entries, 20);
    EXPECT_EQ(again.fetch(TierKind::Full, 5, 1000), nullptr);  // the oldest went to keep the limit
    const auto b = again.fetch(TierKind::Full, 50, 1000);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(*b, bytes_of(50, 1000));
    const auto st = again.fetch(TierKind::State, 7, 500);
    ASSERT_NE(st, nullptr);
    EXPECT_EQ(*st, bytes_of(700, 500));
    // One server per folder: a second instance on it is refused by name while the first lives.
    try {
      PrefixTiers second(c);
      ADD_FAILURE() << "a second instance on the same folder was allowed";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("in use by another server"), std::string::npos) << e.what();
    }
    // Another model (or KV type: the identity) has a folder of its own: nothing of A's is seen.
    PrefixTierConfig other = c;
    other.identity = "model B";
    PrefixTiers b_tiers(other);
    EXPECT_NE(b_tiers.folder(), folder);
    EXPECT_EQ(b_tiers.fetch(TierKind::Full, 50, 1000), nullptr);
  }
  // A smaller limit at the next start trims the oldest entries.
  PrefixTierConfig smaller = c;
  smaller.disk_bytes = 5 * (1000 + 48);
  PrefixTiers trimmed(smaller);
  EXPECT_LE(trimmed.stats().disk.bytes, smaller.disk_bytes);
  EXPECT_LE(folder_bytes(folder), smaller.disk_bytes);
  EXPECT_NE(trimmed.fetch(TierKind::Full, 50, 1000), nullptr);  // fetched last above: the most recently used
}

TEST(PrefixTiers, ABadDiskEntryIsDetectedDroppedAndCounted) {
  test::TempDir dir;
  PrefixTierConfig c;
  c.disk_dir = dir.file("cache");
  c.disk_bytes = 1 << 20;
  c.identity = "m";
  std::string folder;
  {
    PrefixTiers t(c);
    folder = t.folder();
    for (uint64_t n = 1; n <= 5; n++) t.persist(TierKind::Full, n, bytes_of(n, 4096));
    t.flush();
  }
  const auto files = entry_files(folder);
  ASSERT_EQ(files.size(), 5u);
  auto edit = [](const std::string& path, const std::function<void(std::string&)>& f) {
    std::string b = test::read_text(path);
    f(b);
    test::write_bytes(path, b);
  };
  edit(files[0], [](std::string& b) { b[48 + 100] ^= 0x10; });   // a flipped bit in the payload
  edit(files[1], [](std::string& b) { b.resize(b.size() / 2); });  // cut short by a crash
  edit(files[2], [](std::string& b) { b[9] ^= 1; });                // the header (its version field)
  edit(files[3], [](std::string& b) { b += "x"; });                 // longer than it says
  test::write_bytes(folder + "/.tmp-0-0000000000000009.kvb-1", "half a write");
  PrefixTiers t(c);
  EXPECT_FALSE(fs::exists(folder + "/.tmp-0-0000000000000009.kvb-1"));  // a write a crash cut off is removed
  int good = 0;
  for (uint64_t n = 1; n <= 5; n++) good += t.fetch(TierKind::Full, n, 4096) != nullptr;
  EXPECT_EQ(good, 1);
  const auto s = t.stats();
  EXPECT_EQ(s.disk.corrupt, 4);
  EXPECT_EQ(s.disk.entries, 1);
  EXPECT_EQ(entry_files(folder).size(), 1u);  // the bad files are gone
}

TEST(PrefixTiers, AFailingDiskTurnsTheTierOffAndNothingElse) {
  test::TempDir dir;
  PrefixTierConfig c;
  c.disk_dir = dir.file("cache");
  c.disk_bytes = 1 << 20;
  c.ram_bytes = 1 << 20;
  c.identity = "m";
  PrefixTiers t(c);
  // The folder replaced by a file: every write fails, as on a full or read-only disk.
  fs::remove_all(t.folder());
  test::write_bytes(t.folder(), "not a folder");
  t.persist(TierKind::Full, 1, bytes_of(1, 100));
  t.flush();
  const auto s = t.stats();
  EXPECT_FALSE(s.disk_on);
  EXPECT_NE(s.disk_error.find("cannot"), std::string::npos) << s.disk_error;
  EXPECT_FALSE(t.has_disk());
  EXPECT_FALSE(t.wants_persist(TierKind::Full, 2));
  t.put_ram(TierKind::Full, 3, bytes_of(3, 100));  // the RAM tier goes on
  EXPECT_NE(t.fetch(TierKind::Full, 3, 100), nullptr);
}

TEST(PrefixTiers, WarmReadsTheNewestEntriesIntoRam) {
  test::TempDir dir;
  PrefixTierConfig c;
  c.disk_dir = dir.file("cache");
  c.disk_bytes = 1 << 20;
  c.identity = "m";
  {
    PrefixTiers t(c);
    for (uint64_t n = 1; n <= 10; n++) {
      t.persist(TierKind::Full, n, bytes_of(n, 1000));
      t.flush();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // distinct modification times
    }
  }
  c.ram_bytes = 3000;
  PrefixTiers t(c);
  EXPECT_EQ(t.warm(), 3);
  const auto s = t.stats();
  EXPECT_EQ(s.ram.entries, 3);
  EXPECT_EQ(s.disk.hits, 3);
  EXPECT_EQ(s.disk.promotions, 3);
  const int64_t disk_hits = s.disk.hits;
  for (uint64_t n = 8; n <= 10; n++) EXPECT_NE(t.fetch(TierKind::Full, n, 1000), nullptr);
  EXPECT_EQ(t.stats().ram.hits, 3);  // from RAM, not disk
  EXPECT_EQ(t.stats().disk.hits, disk_hits);
}

TEST(PrefixTiers, TheModelIdentityIsTheFilesContents) {
  test::TempDir dir;
  test::write_bytes(dir.file("a.gguf"), "weights one");
  test::write_bytes(dir.file("b.gguf"), "weights one");
  test::write_bytes(dir.file("c.gguf"), "weights two");
  const std::string a = model_file_identity(dir.file("a.gguf"), dir.file("cache"));
  EXPECT_EQ(a.size(), 32u);
  EXPECT_EQ(model_file_identity(dir.file("b.gguf"), dir.file("cache")), a);  // a copy is the same model
  EXPECT_NE(model_file_identity(dir.file("c.gguf"), dir.file("cache")), a);
  EXPECT_EQ(model_file_identity(dir.file("a.gguf"), dir.file("cache")), a);  // remembered
  test::write_bytes(dir.file("a.gguf"), "weights three");                     // changed in place
  EXPECT_NE(model_file_identity(dir.file("a.gguf"), dir.file("cache")), a);
}

// ---- The ledger with tiers ----

std::vector<int32_t> tokens_from(int first, int n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

KvLayout small_layout() {
  KvLayout l;
  l.n_layer = 2;
  l.k_width = 8;
  l.v_width = 8;
  return l;
}

// Writes a recognisable row for every position of seq's first n tokens: (token, layer, element).
void write_rows(PagedKvCache& kv, int32_t seq, const std::vector<int32_t>& tokens, int64_t n) {
  for (int l = 0; l < kv.layout().n_layer; l++)
    for (int64_t p = 0; p < n; p++) {
      std::vector<float> row(8);
      for (int i = 0; i < 8; i++) row[static_cast<size_t>(i)] = static_cast<float>(tokens[static_cast<size_t>(p)] * 100 + l * 10 + i);
      kv.write_k(l, kv.slot(seq, static_cast<int32_t>(p)), row.data());
      kv.write_v(l, kv.slot(seq, static_cast<int32_t>(p)), row.data());
    }
}

TEST(PrefixTiersLedger, ABlockThePoolReusesSpillsToRamAndComesBackWithItsRows) {
  PagedKvCache kv(small_layout(), 4, 4);  // 4 blocks of 4 tokens
  PrefixTierConfig c;
  c.ram_bytes = 1 << 20;
  PrefixTiers tiers(c);
  BlockManager& m = kv.blocks();
  m.set_tiers(&tiers, {kv.store().entry_bytes(TierKind::Full), 0, 0});
  const auto a = tokens_from(1, 13);  // 3 full blocks and a token
  ASSERT_TRUE(m.allocate(1, 13));
  write_rows(kv, 1, a, 13);
  m.publish_prefix(1, a.data(), 13);
  EXPECT_TRUE(m.transfers().empty());  // no disk tier: nothing to persist
  m.erase(1);
  // Another prompt takes the whole pool: a's named blocks are spilled before they are reused.
  const auto b = tokens_from(500, 16);
  ASSERT_TRUE(m.allocate(2, 16));
  int spills = 0;
  for (const auto& t : m.transfers()) spills += t.op == TierTransfer::Op::Spill;
  EXPECT_EQ(spills, 3);
  kv.move_tier_rows(true);
  write_rows(kv, 2, b, 16);
  m.erase(2);  // (b's blocks unnamed: free)
  EXPECT_EQ(tiers.stats().ram.entries, 3);
  // a again: the pool has none of it, the RAM tier has all three blocks.
  const int64_t shared = m.share_prefix(3, a.data(), 13);
  EXPECT_EQ(shared, 12);
  EXPECT_EQ(m.tier_hits().blocks, 3);
  int fills = 0;
  for (const auto& t : m.transfers()) fills += t.op == TierTransfer::Op::Fill;
  EXPECT_EQ(fills, 3);
  kv.move_tier_rows(true);
  ASSERT_TRUE(m.allocate(3, 13));
  for (int l = 0; l < 2; l++)
    for (int p = 0; p < 12; p++) {
      std::vector<float> k(8), v(8);
      kv.read_k(l, kv.slot(3, p), k.data());
      kv.read_v(l, kv.slot(3, p), v.data());
      for (int i = 0; i < 8; i++) {
        ASSERT_EQ(k[static_cast<size_t>(i)], static_cast<float>(a[static_cast<size_t>(p)] * 100 + l * 10 + i)) << l << " " << p;
        ASSERT_EQ(v[static_cast<size_t>(i)], k[static_cast<size_t>(i)]);
      }
    }
  // A later prompt sharing a's blocks finds them in the pool now (named by the fill).
  m.erase(3);
  EXPECT_EQ(m.share_prefix(4, a.data(), 13), 12);
  EXPECT_EQ(m.tier_hits().blocks, 3);  // no more from the tiers
}

TEST(PrefixTiersLedger, ComputedBlocksPersistAndARestartedLedgerFindsThem) {
  test::TempDir dir;
  PrefixTierConfig c;
  c.disk_dir = dir.file("cache");
  c.disk_bytes = 1 << 20;
  c.identity = "m";
  const auto a = tokens_from(7, 10);
  {
    PagedKvCache kv(small_layout(), 8, 4);
    PrefixTiers tiers(c);
    kv.blocks().set_tiers(&tiers, {kv.store().entry_bytes(TierKind::Full), 0, 0});
    ASSERT_TRUE(kv.blocks().allocate(1, 10));
    write_rows(kv, 1, a, 10);
    kv.blocks().publish_prefix(1, a.data(), 10);
    ASSERT_EQ(kv.blocks().transfers().size(), 2u);  // two full blocks computed: persisted
    EXPECT_EQ(kv.blocks().transfers()[0].op, TierTransfer::Op::Persist);
    kv.move_tier_rows(true);
    tiers.flush();
  }
  PagedKvCache kv(small_layout(), 8, 4);  // a new process: an empty pool, the same folder
  PrefixTiers tiers(c);
  kv.blocks().set_tiers(&tiers, {kv.store().entry_bytes(TierKind::Full), 0, 0});
  EXPECT_EQ(kv.blocks().share_prefix(1, a.data(), 10), 8);
  kv.move_tier_rows(true);
  ASSERT_TRUE(kv.blocks().allocate(1, 10));
  std::vector<float> k(8);
  kv.read_k(1, kv.slot(1, 5), k.data());
  EXPECT_EQ(k[3], static_cast<float>(a[5] * 100 + 10 + 3));
  EXPECT_EQ(tiers.stats().disk.hits, 2);
  // A prompt that differs in its second block shares the first only.
  auto b = a;
  b[6] = 999;
  EXPECT_EQ(kv.blocks().share_prefix(2, b.data(), 10), 4);
}

TEST(PrefixTiersLedger, FillsTakeOnlyTheBlocksThePoolHasFree) {
  PagedKvCache kv(small_layout(), 4, 4);
  PrefixTierConfig c;
  c.ram_bytes = 1 << 20;
  PrefixTiers tiers(c);
  BlockManager& m = kv.blocks();
  m.set_tiers(&tiers, {kv.store().entry_bytes(TierKind::Full), 0, 0});
  const auto a = tokens_from(1, 17);
  ASSERT_TRUE(m.allocate(1, 16));
  m.publish_prefix(1, a.data(), 16);
  m.erase(1);
  ASSERT_TRUE(m.allocate(2, 12));  // holds 3 blocks: a's first three spill
  kv.move_tier_rows(true);
  // The pool's one cached block is a's first (the last one freed): shared. The three in RAM would each need a
  // block of the pool, which has none left: the run stops at what fits, and nothing is evicted for it.
  EXPECT_EQ(m.share_prefix(3, a.data(), 17), 4);
  EXPECT_TRUE(m.transfers().empty());
  EXPECT_EQ(m.n_free_blocks(), 0);
  EXPECT_EQ(m.tier_hits().blocks, 0);
}

TEST(PrefixTiersLedger, RecurrentSnapshotsSpillAndRestoreFromTheTiers) {
  KvLayout l = small_layout();
  l.n_recurrent = 1;
  l.state_floats = 6;
  PagedKvCache kv(l, 16, 4, 0, 0, 1);  // one state slot: one snapshot in the pool
  PrefixTierConfig c;
  c.ram_bytes = 1 << 20;
  PrefixTiers tiers(c);
  BlockManager& m = kv.blocks();
  KvStore& store = kv.store();
  m.set_tiers(&tiers, {store.entry_bytes(TierKind::Full), 0, store.entry_bytes(TierKind::State)});
  auto run = [&](int32_t seq, const std::vector<int32_t>& t, float mark) {
    ASSERT_TRUE(m.allocate(seq, 8));
    const int slot = m.state_slot(seq);
    for (int i = 0; i < 6; i++) store.state(0, slot)[i] = mark + static_cast<float>(i);
    store.mark(slot).pos = 8;
    m.publish_prefix(seq, t.data(), 8);
    auto save = m.save_snapshot(seq, 8);
    ASSERT_TRUE(save);
    kv.move_tier_rows(true);  // the old snapshot's spill before the save overwrites it
    BlockCopies bc;
    bc.has_state = true;
    bc.state = *save;
    store.copy(bc);
    m.erase(seq);
  };
  const auto a = tokens_from(1, 9), b = tokens_from(100, 9);
  run(1, a, 10.0f);
  run(2, b, 20.0f);  // takes a's snapshot's place: a's state spills
  EXPECT_EQ(tiers.stats().ram.entries, 1);
  // a again: its blocks are in the pool, its state only in RAM.
  EXPECT_EQ(m.share_prefix(3, a.data(), 9), 8);
  ASSERT_TRUE(m.allocate(3, 9));
  auto restore = m.take_state_restore(3);
  ASSERT_TRUE(restore);
  ASSERT_NE(restore->blob, nullptr);
  BlockCopies bc;
  bc.has_state = true;
  bc.state = *restore;
  store.copy(bc);
  const int slot = m.state_slot(3);
  EXPECT_EQ(store.mark(slot).pos, 8);
  for (int i = 0; i < 6; i++) EXPECT_EQ(store.state(0, slot)[i], 10.0f + static_cast<float>(i));
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {

// --cache-type: entries in a smaller type than the pool's, converted row by row on the way out and in.
TEST(PrefixTiersEntryType, Q8_0EntriesOfAnF16PoolComeBackWithinQ8_0sError) {
  KvLayout l;
  l.n_layer = 2;
  l.k_width = 64;
  l.v_width = 64;
  l.granule = 32;
  l.k_type = l.v_type = KvType::F16;
  PagedKvCache kv(l, 4, 4);
  const int64_t same = kv.store().entry_bytes(TierKind::Full);
  EXPECT_EQ(same, 2 * 4 * (64 * 2 + 64 * 2));  // layers x rows x (K + V) in f16
  kv.store().set_entry_type(KvType::Q8_0);
  EXPECT_EQ(kv.store().entry_type_name(), "q8_0");
  EXPECT_EQ(kv.store().entry_bytes(TierKind::Full), 2 * 4 * 2 * (2 * 34));  // two groups of 34 bytes per row
  ASSERT_TRUE(kv.blocks().allocate(1, 8));
  std::vector<std::vector<float>> rows;
  for (int lay = 0; lay < 2; lay++)
    for (int p = 0; p < 4; p++) {
      rows.push_back(test::random_floats(64, static_cast<uint32_t>(lay * 10 + p), 2.0f));
      kv.write_k(lay, kv.slot(1, p), rows.back().data());
      kv.write_v(lay, kv.slot(1, p), rows.back().data());
    }
  std::vector<uint8_t> entry(static_cast<size_t>(kv.store().entry_bytes(TierKind::Full)));
  kv.store().save_entry(TierKind::Full, kv.block_table(1)[0], entry.data());
  kv.store().load_block(TierKind::Full, kv.block_table(1)[1], entry.data());  // into the second block
  double worst = 0, scale = 0;
  size_t i = 0;
  for (int lay = 0; lay < 2; lay++)
    for (int p = 0; p < 4; p++, i++) {
      std::vector<float> k(64), v(64);
      kv.read_k(lay, kv.slot(1, 4 + p), k.data());
      kv.read_v(lay, kv.slot(1, 4 + p), v.data());
      for (int c = 0; c < 64; c++) {
        worst = std::max({worst, std::fabs(static_cast<double>(k[static_cast<size_t>(c)]) - rows[i][static_cast<size_t>(c)]),
                          std::fabs(static_cast<double>(v[static_cast<size_t>(c)]) - rows[i][static_cast<size_t>(c)])});
        scale = std::max(scale, std::fabs(static_cast<double>(rows[i][static_cast<size_t>(c)])));
      }
    }
  EXPECT_GT(worst, 0.0);               // converted, not copied
  EXPECT_LT(worst, scale / 127 * 2);   // within q8_0's step (and f16's rounding)
  // A type whose groups do not divide the rows is refused by name.
  KvLayout odd = l;
  odd.k_width = odd.v_width = 48;
  odd.granule = 16;
  PagedKvCache kv2(odd, 4, 4);
  EXPECT_NO_THROW(kv2.store().set_entry_type(KvType::Q8_0));  // groups of 16 (the head size's)
  KvLayout f32 = l;
  f32.k_type = f32.v_type = KvType::F32;
  PagedKvCache kv3(f32, 4, 4);
  kv3.store().set_entry_type(KvType::F16);
  EXPECT_EQ(kv3.store().entry_bytes(TierKind::Full), same);  // f32 pool, f16 entries: an f16 pool's size
}

}  // namespace
}  // namespace kestrel

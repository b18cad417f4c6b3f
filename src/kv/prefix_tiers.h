#pragma once
// The prefix cache's lower tiers, below the paged KV pool: host RAM, then a folder on disk. An entry is one
// pool block's rows (every layer of its group), or a recurrent-state snapshot, under the block's prefix name
// (BlockManager: an xxh3 chain over the tokens up to the block's end), so equal prefixes find equal entries.
//
//   pool  --evicted named block (spill)-->  RAM  --LRU out-->  gone (a copy stays on disk)
//   pool  --block computed (persist)----->  disk (written behind, by a thread of its own)
//   RAM / disk  --prefix hit (fetch)----->  pool (a disk hit is promoted into RAM)
//
// Each tier has a byte limit that is never exceeded; within a tier the least recently used entry goes first,
// except RAM entries pinned until a time (Anthropic's cache_control TTLs), which stay while pinned.
//
// The disk tier lives in <dir>/<identity>/, identity a hash of what makes the rows mean anything: the model
// file's contents, the KV types, the block size and the layout (the caller's string) and the entry format's
// version, so entries of another model or KV type are never seen. Each entry is one file written to a temporary
// name and renamed, with a header naming its key and a checksum of its payload: a file a crash cut short or a
// flipped bit is detected on read, deleted and counted (corrupt), and the request recomputes. A server
// restarted on the same folder finds the entries again (one server at a time: a second one on the folder is
// refused, as their limits and deletions would cross) (the index is the folder's listing, oldest first by
// modification time; --cache-warm reads the newest into RAM). A failing write (a full disk) turns the disk
// tier off with a warning; requests go on.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace kestrel {

// What an entry holds: the rows of a full-attention block, of a sliding-window block, or a recurrent state.
enum class TierKind : uint8_t { Full = 0, Sliding = 1, State = 2 };

struct PrefixTierConfig {
  int64_t ram_bytes = 0;  // 0: no RAM tier
  std::string disk_dir;   // empty: no disk tier
  int64_t disk_bytes = 0;
  // What the rows depend on (model file hash, KV types, block size, layout): names the disk tier's folder.
  std::string identity;
  // Pinned RAM entries may take at most this fraction of the RAM tier (the rest stays LRU).
  double max_pinned_fraction = 0.5;
  // Bytes queued for the disk writer at most; a persist beyond it is skipped (counted).
  int64_t write_queue_bytes = 64 << 20;
};

class PrefixTiers {
 public:
  using Blob = std::shared_ptr<const std::vector<uint8_t>>;
  static constexpr uint32_t kFormatVersion = 1;

  explicit PrefixTiers(const PrefixTierConfig& config);
  ~PrefixTiers();  // the writer finishes what is queued
  PrefixTiers(const PrefixTiers&) = delete;
  PrefixTiers& operator=(const PrefixTiers&) = delete;

  bool has_ram() const { return c_.ram_bytes > 0; }
  bool has_disk() const { return disk_on_.load(); }
  // The disk tier's folder for this identity ("" without one).
  const std::string& folder() const { return folder_; }

  // Whether a spill of this entry into RAM would add anything (a RAM tier, and not there already; a RAM entry
  // found is touched).
  bool wants_spill(TierKind kind, uint64_t name);
  // Into RAM, the least recently used unpinned entries making room; an entry larger than the tier is dropped.
  void put_ram(TierKind kind, uint64_t name, std::vector<uint8_t> bytes);
  // Whether persisting this entry would add anything (a disk tier, and not on disk or queued already).
  bool wants_persist(TierKind kind, uint64_t name);
  // Onto disk, written behind by the writer thread (skipped when its queue is full).
  void persist(TierKind kind, uint64_t name, std::vector<uint8_t> bytes);
  // The entry's bytes: from RAM (touched), else read from disk, checked and promoted into RAM. Null: in neither
  // (a miss), or the disk copy was bad (dropped, counted as corrupt). expect_bytes: the size the caller's rows
  // take (a different size is a bad entry too).
  Blob fetch(TierKind kind, uint64_t name, int64_t expect_bytes);
  // Keeps a RAM entry (now or once spilled) from LRU eviction until until_s (seconds on the steady clock); false
  // when the pinned bytes would pass their share of the tier (not pinned).
  bool pin(TierKind kind, uint64_t name, double until_s, int64_t entry_bytes) {
    return pin({{kind, name, entry_bytes}}, until_s) == 1;
  }
  // The same for many entries at once (a prompt's prefix), in order, until the pinned share is reached; returns
  // how many were pinned. (One pass over the tier, not one per entry.)
  struct PinKey {
    TierKind kind;
    uint64_t name;
    int64_t bytes;
  };
  int64_t pin(const std::vector<PinKey>& keys, double until_s);
  // Reads the most recently used disk entries into RAM until it is full (or max_bytes); returns entries read.
  int64_t warm(int64_t max_bytes = -1);
  // Waits until the writer has written everything queued (tests, shutdown).
  void flush();

  struct TierStats {
    int64_t entries = 0, bytes = 0, limit = 0;
    int64_t hits = 0, misses = 0, promotions = 0, evictions = 0, writes = 0, corrupt = 0, dropped = 0;
    double load_ms = 0;  // reading hits back (RAM: copying is the caller's; disk: read and check)
  };
  struct Stats {
    TierStats ram, disk;
    int64_t pinned_entries = 0, pinned_bytes = 0;  // with_pins
    bool disk_on = false;
    std::string disk_error;  // why the disk tier turned off
  };
  // with_pins: also count the pinned entries (a pass over the RAM tier: for GET /cache, not every step).
  Stats stats(bool with_pins = false) const;
  // Steady-clock seconds (the pins' clock).
  static double now_s();

 private:
  struct Key {
    TierKind kind;
    uint64_t name;
    bool operator==(const Key& o) const { return kind == o.kind && name == o.name; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return static_cast<size_t>(k.name ^ (static_cast<uint64_t>(k.kind) << 61)); }
  };
  struct RamEntry {
    Blob blob;
    std::list<Key>::iterator lru;
    double pinned_until = 0;
  };
  struct DiskEntry {
    int64_t bytes = 0;  // the file's
    std::list<Key>::iterator lru;
  };
  std::string path_of(const Key& k) const;
  void ram_insert(const Key& k, Blob blob);  // lock held
  bool ram_make_room(int64_t bytes);          // lock held
  void disk_erase(const Key& k, bool corrupt);  // lock held: forgets and deletes the file
  void disk_off(const std::string& why);        // lock held
  void scan_folder();
  void writer_loop();
  bool pinned(const RamEntry& e) const { return e.pinned_until > now_s(); }

  PrefixTierConfig c_;
  std::string folder_;
  mutable std::mutex mu_;
  std::condition_variable writer_cv_, flushed_cv_;
  std::unordered_map<Key, RamEntry, KeyHash> ram_;
  std::list<Key> ram_lru_;  // oldest first
  int64_t ram_bytes_ = 0;
  std::unordered_map<Key, double, KeyHash> pins_;  // until, for entries pinned before they reached RAM
  std::unordered_map<Key, DiskEntry, KeyHash> disk_;
  std::list<Key> disk_lru_;
  int64_t disk_bytes_ = 0;
  struct Write {
    Key key;
    std::vector<uint8_t> bytes;
  };
  std::deque<Write> queue_;
  std::unordered_map<Key, int, KeyHash> queued_;  // keys in the queue or being written
  int64_t queue_bytes_ = 0;
  bool writing_ = false;
  bool stop_ = false;
  std::atomic<bool> disk_on_{false};
  Stats st_;
  std::thread writer_;
  int lock_fd_ = -1;  // the disk folder's LOCK file, held (flock) while this instance lives
};

// The identity of a model file for the disk tier: XXH3-128 of its bytes, as 32 hex digits. The hash is
// remembered in <cache_dir>/files/ under the file's path, size and modification time, so a large file is read
// once, not at every start.
std::string model_file_identity(const std::string& path, const std::string& cache_dir);

}  // namespace kestrel

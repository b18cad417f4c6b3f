#include "kv/prefix_tiers.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace kestrel {

namespace fs = std::filesystem;

namespace {

constexpr char kEntryMagic[8] = {'K', 'E', 'S', 'T', 'R', 'K', 'V', '\0'};
// magic, version, kind, name, payload bytes, payload xxh3, then the xxh3 of those 40 bytes.
constexpr size_t kHeaderBytes = 48;

struct Header {
  uint32_t version = 0, kind = 0;
  uint64_t name = 0, payload = 0, payload_hash = 0;
};

void put64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }
void put32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
uint64_t get64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
uint32_t get32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void encode_header(const Header& h, uint8_t* out) {
  std::memcpy(out, kEntryMagic, 8);
  put32(out + 8, h.version);
  put32(out + 12, h.kind);
  put64(out + 16, h.name);
  put64(out + 24, h.payload);
  put64(out + 32, h.payload_hash);
  put64(out + 40, XXH3_64bits(out, 40));
}

bool decode_header(const uint8_t* in, Header& h) {
  if (std::memcmp(in, kEntryMagic, 8) != 0 || get64(in + 40) != XXH3_64bits(in, 40)) return false;
  h.version = get32(in + 8);
  h.kind = get32(in + 12);
  h.name = get64(in + 16);
  h.payload = get64(in + 24);
  h.payload_hash = get64(in + 32);
  return true;
}

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

}  // namespace

double PrefixTiers::now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

PrefixTiers::PrefixTiers(const PrefixTierConfig& config) : c_(config) {
  if (c_.ram_bytes < 0 || c_.disk_bytes < 0) throw Error("prefix cache tiers: a negative size");
  st_.ram.limit = c_.ram_bytes;
  if (!c_.disk_dir.empty()) {
    if (c_.disk_bytes <= 0) throw Error("--cache-dir needs a positive --cache-disk size");
    const std::string id = hex64(XXH3_64bits(c_.identity.data(), c_.identity.size())) + "-v" +
                           std::to_string(kFormatVersion);
    folder_ = (fs::path(c_.disk_dir) / id).string();
    std::error_code ec;
    fs::create_directories(folder_, ec);
    if (ec) throw Error(fmt::format("--cache-dir {}: cannot create {}: {}", c_.disk_dir, folder_, ec.message()));
    // One server per folder: two would each keep the limit by their own count and delete each other's files.
    lock_fd_ = ::open((fs::path(folder_) / "LOCK").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock_fd_ < 0 || ::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (lock_fd_ >= 0) ::close(lock_fd_);
      lock_fd_ = -1;
      throw Error(fmt::format("--cache-dir {}: {} is in use by another server ({}); give each server a folder of "
                              "its own",
                              c_.disk_dir, folder_, std::strerror(err)));
    }
    // A note of what the folder holds, for a person looking at it (never read back).
    std::ofstream(fs::path(folder_) / "IDENTITY") << c_.identity << "\n";
    st_.disk.limit = c_.disk_bytes;
    scan_folder();
    disk_on_ = true;
    st_.disk_on = true;
    writer_ = std::thread([this] { writer_loop(); });
  }
}

PrefixTiers::~PrefixTiers() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  writer_cv_.notify_all();
  if (writer_.joinable()) writer_.join();
  if (lock_fd_ >= 0) ::close(lock_fd_);  // (the lock goes with it)
}

std::string PrefixTiers::path_of(const Key& k) const {
  return (fs::path(folder_) / fmt::format("{}-{}.kvb", static_cast<int>(k.kind), hex64(k.name))).string();
}

void PrefixTiers::scan_folder() {
  struct Found {
    Key key;
    int64_t bytes;
    fs::file_time_type when;
  };
  std::vector<Found> found;
  std::error_code ec;
  for (const auto& de : fs::directory_iterator(folder_, ec)) {
    const std::string file = de.path().filename().string();
    if (file.rfind(".tmp-", 0) == 0) {  // a write a crash cut off
      fs::remove(de.path(), ec);
      continue;
    }
    unsigned kind = 0;
    char hex[17] = {};
    if (file.size() != 2 + 16 + 4 || std::sscanf(file.c_str(), "%u-%16[0-9a-f].kvb", &kind, hex) != 2 || kind > 2)
      continue;
    const auto size = static_cast<int64_t>(de.file_size(ec));
    if (ec) continue;
    found.push_back({{static_cast<TierKind>(kind), std::stoull(hex, nullptr, 16)}, size, de.last_write_time(ec)});
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.when < b.when; });
  for (const Found& f : found) {
    disk_[f.key] = {f.bytes, disk_lru_.insert(disk_lru_.end(), f.key)};
    disk_bytes_ += f.bytes;
  }
  while (disk_bytes_ > c_.disk_bytes && !disk_lru_.empty()) {  // a smaller --cache-disk than last time
    disk_erase(disk_lru_.front(), false);
    st_.disk.evictions++;
  }
}

bool PrefixTiers::wants_spill(TierKind kind, uint64_t name) {
  if (c_.ram_bytes <= 0) return false;
  std::lock_guard lock(mu_);
  auto it = ram_.find({kind, name});
  if (it == ram_.end()) return true;
  ram_lru_.splice(ram_lru_.end(), ram_lru_, it->second.lru);
  return false;
}

bool PrefixTiers::ram_make_room(int64_t bytes) {
  if (bytes > c_.ram_bytes) return false;
  auto it = ram_lru_.begin();
  while (ram_bytes_ + bytes > c_.ram_bytes && it != ram_lru_.end()) {
    auto e = ram_.find(*it);
    if (pinned(e->second)) {
      ++it;
      continue;
    }
    ram_bytes_ -= static_cast<int64_t>(e->second.blob->size());
    ram_.erase(e);
    it = ram_lru_.erase(it);
    st_.ram.evictions++;
  }
  return ram_bytes_ + bytes <= c_.ram_bytes;
}

void PrefixTiers::ram_insert(const Key& k, Blob blob) {
  const auto bytes = static_cast<int64_t>(blob->size());
  if (ram_.count(k) || !ram_make_room(bytes)) {
    if (!ram_.count(k)) st_.ram.dropped++;
    return;
  }
  RamEntry e{std::move(blob), ram_lru_.insert(ram_lru_.end(), k), 0};
  if (auto p = pins_.find(k); p != pins_.end()) {
    if (p->second > now_s()) e.pinned_until = p->second;
    pins_.erase(p);
  }
  ram_.emplace(k, std::move(e));
  ram_bytes_ += bytes;
}

void PrefixTiers::put_ram(TierKind kind, uint64_t name, std::vector<uint8_t> bytes) {
  if (c_.ram_bytes <= 0) return;
  auto blob = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
  std::lock_guard lock(mu_);
  ram_insert({kind, name}, std::move(blob));
}

bool PrefixTiers::wants_persist(TierKind kind, uint64_t name) {
  if (!disk_on_) return false;
  std::lock_guard lock(mu_);
  const Key k{kind, name};
  return !disk_.count(k) && !queued_.count(k);
}

void PrefixTiers::persist(TierKind kind, uint64_t name, std::vector<uint8_t> bytes) {
  if (!disk_on_) return;
  {
    std::lock_guard lock(mu_);
    const Key k{kind, name};
    if (disk_.count(k) || queued_.count(k)) return;
    const auto n = static_cast<int64_t>(bytes.size());
    if (queue_bytes_ + n > c_.write_queue_bytes || n + static_cast<int64_t>(kHeaderBytes) > c_.disk_bytes) {
      st_.disk.dropped++;
      return;
    }
    queue_bytes_ += n;
    queued_[k]++;
    queue_.push_back({k, std::move(bytes)});
  }
  writer_cv_.notify_one();
}

void PrefixTiers::disk_erase(const Key& k, bool corrupt) {
  auto it = disk_.find(k);
  if (it == disk_.end()) return;
  disk_bytes_ -= it->second.bytes;
  disk_lru_.erase(it->second.lru);
  disk_.erase(it);
  std::error_code ec;
  fs::remove(path_of(k), ec);
  if (corrupt) st_.disk.corrupt++;
}

void PrefixTiers::disk_off(const std::string& why) {
  if (!disk_on_) return;
  disk_on_ = false;
  st_.disk_on = false;
  st_.disk_error = why;
  fmt::print(stderr, "warning: the prefix cache's disk tier is off: {}\n", why);
}

void PrefixTiers::writer_loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    writer_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_, and everything written
    Write w = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    const auto total = static_cast<int64_t>(kHeaderBytes + w.bytes.size());
    bool ok = disk_on_;
    // Room first (the limit holds while the file is written: its bytes count from now).
    while (ok && disk_bytes_ + total > c_.disk_bytes && !disk_lru_.empty()) {
      disk_erase(disk_lru_.front(), false);
      st_.disk.evictions++;
    }
    ok = ok && disk_bytes_ + total <= c_.disk_bytes;
    if (ok) disk_bytes_ += total;
    const std::string path = path_of(w.key);
    lock.unlock();
    std::string error;
    if (ok) {
      uint8_t head[kHeaderBytes];
      encode_header({kFormatVersion, static_cast<uint32_t>(w.key.kind), w.key.name, w.bytes.size(),
                     XXH3_64bits(w.bytes.data(), w.bytes.size())},
                    head);
      const std::string tmp =
          (fs::path(folder_) / fmt::format(".tmp-{}-{}", fs::path(path).filename().string(), getpid())).string();
      const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      auto write_all = [&](const uint8_t* p, size_t n) {
        while (n > 0) {
          const ssize_t k = ::write(fd, p, n);
          if (k < 0 && errno == EINTR) continue;
          if (k <= 0) return false;
          p += k;
          n -= static_cast<size_t>(k);
        }
        return true;
      };
      if (fd < 0) {
        error = fmt::format("cannot create {}: {}", tmp, std::strerror(errno));
      } else {
        const bool written = write_all(head, kHeaderBytes) && write_all(w.bytes.data(), w.bytes.size());
        const int err = errno;
        ::close(fd);
        if (!written || ::rename(tmp.c_str(), path.c_str()) != 0) {
          error = fmt::format("cannot write {}: {}", path, std::strerror(written ? errno : err));
          ::unlink(tmp.c_str());
        }
      }
    }
    lock.lock();
    queue_bytes_ -= static_cast<int64_t>(w.bytes.size());
    if (--queued_[w.key] == 0) queued_.erase(w.key);
    if (ok && error.empty()) {
      if (disk_.count(w.key)) {  // (cannot happen: a key is queued once)
        disk_bytes_ -= total;
      } else {
        disk_[w.key] = {total, disk_lru_.insert(disk_lru_.end(), w.key)};
        st_.disk.writes++;
      }
    } else if (ok) {
      disk_bytes_ -= total;
      disk_off(error);
    } else {
      st_.disk.dropped++;
    }
    writing_ = false;
    if (queue_.empty()) flushed_cv_.notify_all();
  }
}

void PrefixTiers::flush() {
  std::unique_lock lock(mu_);
  flushed_cv_.wait(lock, [&] { return (queue_.empty() && !writing_) || !writer_.joinable(); });
}

PrefixTiers::Blob PrefixTiers::fetch(TierKind kind, uint64_t name, int64_t expect_bytes) {
  const Key k{kind, name};
  const auto t0 = std::chrono::steady_clock::now();
  std::lock_guard lock(mu_);
  auto elapsed_ms = [&] { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(); };
  if (auto it = ram_.find(k); it != ram_.end()) {
    if (static_cast<int64_t>(it->second.blob->size()) == expect_bytes) {
      ram_lru_.splice(ram_lru_.end(), ram_lru_, it->second.lru);
      st_.ram.hits++;
      st_.ram.load_ms += elapsed_ms();
      return it->second.blob;
    }
    ram_bytes_ -= static_cast<int64_t>(it->second.blob->size());  // (another layout's: never, by the key)
    ram_lru_.erase(it->second.lru);
    ram_.erase(it);
  }
  if (c_.ram_bytes > 0) st_.ram.misses++;
  if (!disk_on_) return nullptr;
  auto it = disk_.find(k);
  if (it == disk_.end()) {
    st_.disk.misses++;
    return nullptr;
  }
  // Read and check: header, key, size, checksum; anything off drops the entry.
  const std::string path = path_of(k);
  std::vector<uint8_t> bytes;
  bool good = false;
  if (const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC); fd >= 0) {
    uint8_t head[kHeaderBytes];
    Header h;
    if (::pread(fd, head, kHeaderBytes, 0) == static_cast<ssize_t>(kHeaderBytes) && decode_header(head, h) &&
        h.version == kFormatVersion && h.kind == static_cast<uint32_t>(kind) && h.name == name &&
        static_cast<int64_t>(h.payload) == expect_bytes) {
      bytes.resize(h.payload);
      size_t got = 0;
      while (got < bytes.size()) {
        const ssize_t r = ::pread(fd, bytes.data() + got, bytes.size() - got, static_cast<off_t>(kHeaderBytes + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += static_cast<size_t>(r);
      }
      uint8_t extra;
      good = got == bytes.size() && ::pread(fd, &extra, 1, static_cast<off_t>(kHeaderBytes + got)) == 0 &&
             XXH3_64bits(bytes.data(), bytes.size()) == h.payload_hash;
    }
    ::close(fd);
  }
  if (!good) {
    disk_erase(k, true);
    st_.disk.misses++;
    return nullptr;
  }
  disk_lru_.splice(disk_lru_.end(), disk_lru_, it->second.lru);
  std::error_code ec;
  fs::last_write_time(path, fs::file_time_type::clock::now(), ec);  // the order a restart finds
  st_.disk.hits++;
  auto blob = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
  if (c_.ram_bytes > 0 && !ram_.count(k)) {
    ram_insert(k, blob);
    if (ram_.count(k)) st_.disk.promotions++;
  }
  st_.disk.load_ms += elapsed_ms();
  return blob;
}

int64_t PrefixTiers::pin(const std::vector<PinKey>& keys, double until_s) {
  if (c_.ram_bytes <= 0) return 0;
  std::lock_guard lock(mu_);
  const double now = now_s();
  // Pins of entries that never came expire with their time.
  for (auto it = pins_.begin(); it != pins_.end();) it = it->second <= now ? pins_.erase(it) : std::next(it);
  int64_t pinned_bytes = 0;
  for (const auto& [key, e] : ram_)
    if (e.pinned_until > now) pinned_bytes += static_cast<int64_t>(e.blob->size());
  for (const auto& [key, until] : pins_) {
    auto it = ram_.find(key);
    pinned_bytes += it == ram_.end() ? (keys.empty() ? 0 : keys.front().bytes) : 0;  // (its size once it comes)
  }
  const auto cap = static_cast<int64_t>(c_.max_pinned_fraction * static_cast<double>(c_.ram_bytes));
  int64_t n = 0;
  for (const PinKey& p : keys) {
    const Key k{p.kind, p.name};
    auto it = ram_.find(k);
    auto pending = pins_.find(k);
    const bool already = (it != ram_.end() && it->second.pinned_until > now) || pending != pins_.end();
    if (!already) {
      if (pinned_bytes + p.bytes > cap) break;
      pinned_bytes += p.bytes;
    }
    if (it != ram_.end())
      it->second.pinned_until = std::max(it->second.pinned_until, until_s);
    else
      pins_[k] = std::max(pending != pins_.end() ? pending->second : 0.0, until_s);
    n++;
  }
  return n;
}

int64_t PrefixTiers::warm(int64_t max_bytes) {
  if (c_.ram_bytes <= 0 || !disk_on_) return 0;
  std::vector<std::pair<Key, int64_t>> newest;
  {
    std::lock_guard lock(mu_);
    int64_t room = max_bytes < 0 ? c_.ram_bytes : std::min(max_bytes, c_.ram_bytes);
    for (auto it = disk_lru_.rbegin(); it != disk_lru_.rend(); ++it) {
      const int64_t payload = disk_[*it].bytes - static_cast<int64_t>(kHeaderBytes);
      if (payload > room) break;
      room -= payload;
      newest.emplace_back(*it, payload);
    }
  }
  // Oldest of those first, so that the newest end up most recently used in RAM too.
  int64_t n = 0;
  for (auto it = newest.rbegin(); it != newest.rend(); ++it) n += fetch(it->first.kind, it->first.name, it->second) != nullptr;
  return n;
}

PrefixTiers::Stats PrefixTiers::stats(bool with_pins) const {
  std::lock_guard lock(mu_);
  Stats s = st_;
  s.ram.entries = static_cast<int64_t>(ram_.size());
  s.ram.bytes = ram_bytes_;
  s.disk.entries = static_cast<int64_t>(disk_.size());
  s.disk.bytes = disk_bytes_;
  s.disk_on = disk_on_;
  if (!with_pins) return s;
  const double now = now_s();
  for (const auto& [key, e] : ram_)
    if (e.pinned_until > now) {
      s.pinned_entries++;
      s.pinned_bytes += static_cast<int64_t>(e.blob->size());
    }
  return s;
}

std::string model_file_identity(const std::string& path, const std::string& cache_dir) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) throw Error(fmt::format("{}: {}", path, std::strerror(errno)));
  std::error_code ec;
  const std::string abs = fs::absolute(path, ec).string();
  const std::string stamp = fmt::format("{} {} {}.{:09}", abs, static_cast<int64_t>(st.st_size),
                                        static_cast<int64_t>(st.st_mtim.tv_sec), static_cast<int64_t>(st.st_mtim.tv_nsec));
  const fs::path memo = fs::path(cache_dir) / "files" / (hex64(XXH3_64bits(stamp.data(), stamp.size())) + ".hash");
  {
    std::ifstream in(memo);
    std::string line, hash;
    if (std::getline(in, line) && line == stamp && std::getline(in, hash) && hash.size() == 32) return hash;
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("{}: {}", path, std::strerror(errno)));
  XXH3_state_t* state = XXH3_createState();
  XXH3_128bits_reset(state);
  std::vector<uint8_t> buf(8 << 20);
  for (;;) {
    const ssize_t r = ::read(fd, buf.data(), buf.size());
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      ::close(fd);
      XXH3_freeState(state);
      throw Error(fmt::format("{}: {}", path, std::strerror(errno)));
    }
    if (r == 0) break;
    XXH3_128bits_update(state, buf.data(), static_cast<size_t>(r));
  }
  ::close(fd);
  const XXH128_hash_t h = XXH3_128bits_digest(state);
  XXH3_freeState(state);
  const std::string hash = hex64(h.high64) + hex64(h.low64);
  fs::create_directories(memo.parent_path(), ec);
  std::ofstream(memo) << stamp << "\n" << hash << "\n";
  return hash;
}

}  // namespace kestrel

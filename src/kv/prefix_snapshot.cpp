#include "kv/prefix_snapshot.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <climits>
#include <cstring>

#include "core/error.h"

namespace kestrel {

namespace {

constexpr char kSlotMagic[8] = {'K', 'S', 'T', 'R', 'S', 'L', 'T', '1'};
constexpr uint32_t kSlotVersion = 1;
// The ledger's sequence id for a collection (never a request's).
constexpr int32_t kCollectSeq = INT32_MIN + 17;

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

class Reader {
 public:
  explicit Reader(std::string_view b) : b_(b) {}
  template <typename T>
  T get(const char* what) {
    T v;
    need(sizeof(T), what);
    std::memcpy(&v, b_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  std::string_view bytes(size_t n, const char* what) {
    need(n, what);
    const std::string_view v = b_.substr(at_, n);
    at_ += n;
    return v;
  }
  size_t at() const { return at_; }

 private:
  void need(size_t n, const char* what) const {
    if (b_.size() - at_ < n) throw Error(fmt::format("the slot file is cut short (in its {})", what));
  }
  std::string_view b_;
  size_t at_ = 0;
};

}  // namespace

PrefixSnapshot collect_prefix(PagedKvCache& kv, const std::vector<int32_t>& tokens) {
  PrefixSnapshot s;
  s.tokens = tokens;
  BlockManager& m = kv.blocks();
  // share_prefix leaves a prompt's last token to compute: one token more, so that every full block counts.
  std::vector<int32_t> t = tokens;
  t.push_back(0);
  s.covered = m.share_prefix(kCollectSeq, t.data(), static_cast<int64_t>(t.size()));
  try {
    kv.move_tier_rows(false);  // the tiers' blocks into the pool (and what that evicts out to RAM)
    const std::vector<uint64_t>& names = m.prefix_names(kCollectSeq);
    const int64_t k = s.covered / kv.block_size();
    for (int g = 0; g < m.n_groups(); g++) {
      const TierKind kind = g == 0 ? TierKind::Full : TierKind::Sliding;
      const int32_t* table = m.block_table(kCollectSeq, g);
      for (int64_t j = 0; j < k; j++) {
        if (table[j] < 0) continue;  // a sliding block outside the last window: not needed
        PrefixEntry e{kind, names[static_cast<size_t>(j)], std::vector<uint8_t>(static_cast<size_t>(kv.store().entry_bytes(kind)))};
        kv.store().save_entry(kind, table[j], e.bytes.data());
        s.entries.push_back(std::move(e));
      }
    }
    if (const auto state = k > 0 ? m.prefix_state(kCollectSeq) : std::nullopt) {
      PrefixEntry e{TierKind::State, names[static_cast<size_t>(k - 1)], {}};
      if (state->blob) {
        e.bytes = *state->blob;
      } else {
        e.bytes.resize(static_cast<size_t>(kv.store().entry_bytes(TierKind::State)));
        kv.store().save_entry(TierKind::State, state->snapshot, e.bytes.data());
      }
      s.entries.push_back(std::move(e));
    }
  } catch (...) {
    m.erase(kCollectSeq);
    throw;
  }
  m.erase(kCollectSeq);
  return s;
}

int64_t offer_prefix(PagedKvCache& kv, const PrefixSnapshot& s) {
  PrefixTiers* tiers = kv.blocks().tiers();
  if (!tiers || !tiers->has_ram()) return 0;
  int64_t n = 0;
  for (const PrefixEntry& e : s.entries) {
    tiers->put_ram(e.kind, e.name, e.bytes);
    n++;
  }
  return n;
}

std::string encode_snapshot(const PrefixSnapshot& s, const std::string& identity) {
  std::string out(kSlotMagic, sizeof(kSlotMagic));
  put<uint32_t>(out, kSlotVersion);
  put<uint32_t>(out, static_cast<uint32_t>(identity.size()));
  out += identity;
  put<uint64_t>(out, s.tokens.size());
  out.append(reinterpret_cast<const char*>(s.tokens.data()), s.tokens.size() * sizeof(int32_t));
  put<int64_t>(out, s.covered);
  put<uint32_t>(out, static_cast<uint32_t>(s.entries.size()));
  for (const PrefixEntry& e : s.entries) {
    put<uint8_t>(out, static_cast<uint8_t>(e.kind));
    put<uint64_t>(out, e.name);
    put<uint64_t>(out, e.bytes.size());
    out.append(reinterpret_cast<const char*>(e.bytes.data()), e.bytes.size());
  }
  put<uint64_t>(out, XXH3_64bits(out.data(), out.size()));
  return out;
}

PrefixSnapshot decode_snapshot(const std::string& bytes, const std::string& identity, const KvStore& store) {
  if (bytes.size() < sizeof(kSlotMagic) + 8 || std::memcmp(bytes.data(), kSlotMagic, sizeof(kSlotMagic)) != 0)
    throw Error("not a Kestrel slot file");
  uint64_t sum;
  std::memcpy(&sum, bytes.data() + bytes.size() - 8, 8);
  if (XXH3_64bits(bytes.data(), bytes.size() - 8) != sum)
    throw Error("the slot file is cut short or altered (its checksum does not match)");
  Reader r(std::string_view(bytes).substr(0, bytes.size() - 8));
  r.bytes(sizeof(kSlotMagic), "magic");
  if (const auto v = r.get<uint32_t>("version"); v != kSlotVersion)
    throw Error(fmt::format("the slot file has format version {}; this server reads version {}", v, kSlotVersion));
  const std::string_view id = r.bytes(r.get<uint32_t>("identity size"), "identity");
  if (id != identity)
    throw Error(fmt::format("the slot file was saved by another model, device or KV cache type ({}; this server: {})",
                            id, identity));
  PrefixSnapshot s;
  const auto n_tokens = r.get<uint64_t>("token count");
  const std::string_view t = r.bytes(n_tokens * sizeof(int32_t), "tokens");
  s.tokens.resize(n_tokens);
  std::memcpy(s.tokens.data(), t.data(), t.size());
  s.covered = r.get<int64_t>("covered tokens");
  const auto n_entries = r.get<uint32_t>("entry count");
  for (uint32_t i = 0; i < n_entries; i++) {
    PrefixEntry e;
    const auto kind = r.get<uint8_t>("entry kind");
    if (kind > 2) throw Error(fmt::format("the slot file's entry {} is of an unknown kind {}", i, kind));
    e.kind = static_cast<TierKind>(kind);
    e.name = r.get<uint64_t>("entry name");
    const auto size = r.get<uint64_t>("entry size");
    if (static_cast<int64_t>(size) != store.entry_bytes(e.kind))
      throw Error(fmt::format("the slot file's entry {} holds {} bytes; this cache's take {}", i, size,
                              store.entry_bytes(e.kind)));
    const std::string_view b = r.bytes(size, "entries");
    e.bytes.assign(b.begin(), b.end());
    s.entries.push_back(std::move(e));
  }
  return s;
}

}  // namespace kestrel

#pragma once
// A prompt's cached prefix as a file, for llama-server's slot save and restore (POST /slots/N?action=save|
// restore): the KV rows of every full block of the prompt that the pool or a lower tier holds (the sliding-window
// layers' blocks and the recurrent state at its end too), under their prefix names. Restoring offers them to the
// RAM tier, where the next prompt starting so finds them, as it would have found the original blocks.
//
// File: "KSTRSLT1", the format version, the identity the tiers use (model file hash, device, KV types, block
// size, layout: a file from another model or KV type is refused by name), the tokens, the entries (kind, name,
// bytes), then an XXH3 of everything before it (a cut or altered file is refused).
#include <cstdint>
#include <string>
#include <vector>

#include "kv/kv_cache.h"

namespace kestrel {

struct PrefixEntry {
  TierKind kind = TierKind::Full;
  uint64_t name = 0;
  std::vector<uint8_t> bytes;
};

struct PrefixSnapshot {
  std::vector<int32_t> tokens;
  int64_t covered = 0;  // tokens whose rows the entries hold (whole blocks from the start)
  std::vector<PrefixEntry> entries;
};

// The rows of tokens' longest cached prefix (engine thread: the pool's rows are read between steps).
PrefixSnapshot collect_prefix(PagedKvCache& kv, const std::vector<int32_t>& tokens);
// The entries into the RAM tier; returns how many it took (0 without a RAM tier).
int64_t offer_prefix(PagedKvCache& kv, const PrefixSnapshot& s);

std::string encode_snapshot(const PrefixSnapshot& s, const std::string& identity);
// Throws Error naming what is wrong: not a slot file, another version, another model or KV type (identity), cut
// short or altered, an entry of the wrong size for this cache.
PrefixSnapshot decode_snapshot(const std::string& bytes, const std::string& identity, const KvStore& store);

}  // namespace kestrel

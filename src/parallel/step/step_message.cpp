#include "parallel/step/step_message.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "core/error.h"

namespace kestrel {
namespace {

template <class T>
void put(std::vector<uint8_t>& out, const T* p, size_t n) {
  // Grown, then copied into (GCC 12's -Wstringop-overflow misreads an insert of a few bytes at the end of an
  // empty vector as an overflow).
  const size_t at = out.size(), bytes = n * sizeof(T);
  out.resize(at + bytes);
  if (bytes > 0) std::memcpy(out.data() + at, p, bytes);
}
template <class T>
void put(std::vector<uint8_t>& out, T v) {
  put(out, &v, 1);
}

struct Reader {
  const std::vector<uint8_t>& in;
  size_t at = 0;
  template <class T>
  void get(T* p, size_t n) {
    if (n > (in.size() - at) / sizeof(T))
      throw Error(fmt::format("tensor-parallel step message: {} bytes end before its contents", in.size()));
    std::memcpy(p, in.data() + at, n * sizeof(T));
    at += n * sizeof(T);
  }
  template <class T>
  T get() {
    T v;
    get(&v, 1);
    return v;
  }
};

}  // namespace

std::vector<uint8_t> encode_step(const Batch& b, const BatchPlacement& place, int n_groups, int block_size,
                                 const std::vector<BlockCopy>& copies) {
  const int64_t n = b.size();
  std::vector<uint8_t> out;
  put<int64_t>(out, n);
  put<int64_t>(out, n_groups);
  put<int64_t>(out, static_cast<int64_t>(copies.size()));
  put(out, b.tokens.data(), b.tokens.size());
  put(out, b.positions.data(), b.positions.size());
  put(out, b.seq_ids.data(), b.seq_ids.size());
  put(out, b.want_logits.data(), b.want_logits.size());
  for (const BlockCopy& c : copies) {
    put<int32_t>(out, c.group);
    put<int32_t>(out, c.from);
    put<int32_t>(out, c.to);
  }
  for (int g = 0; g < n_groups; g++) {
    put(out, place.slots[g].data(), static_cast<size_t>(n));
    // Each sequence's table once, as far as its furthest row in the batch reads.
    std::map<int32_t, int32_t> blocks;
    for (int64_t i = 0; i < n; i++) {
      int32_t& need = blocks[b.seq_ids[i]];
      need = std::max(need, b.positions[i] / block_size + 1);
    }
    put<int64_t>(out, static_cast<int64_t>(blocks.size()));
    for (const auto& [seq, count] : blocks) {
      const int64_t row = std::find(b.seq_ids.begin(), b.seq_ids.end(), seq) - b.seq_ids.begin();
      put<int32_t>(out, seq);
      put<int32_t>(out, count);
      put(out, place.tables[g][row], static_cast<size_t>(count));
    }
  }
  return out;
}

void decode_step(const std::vector<uint8_t>& bytes, DecodedStep& out) {
  Reader r{bytes};
  const auto n = r.get<int64_t>();
  const auto n_groups = r.get<int64_t>();
  const auto n_copies = r.get<int64_t>();
  if (n < 0 || n > (int64_t{1} << 24) || n_groups < 1 || n_groups > 2 || n_copies < 0 || n_copies > (int64_t{1} << 24))
    throw Error(fmt::format("tensor-parallel step message: bad sizes ({} rows, {} groups, {} copies)", n, n_groups,
                            n_copies));
  Batch& b = out.batch;
  const auto un = static_cast<size_t>(n);
  b.tokens.resize(un), b.positions.resize(un), b.seq_ids.resize(un), b.want_logits.resize(un);
  r.get(b.tokens.data(), un);
  r.get(b.positions.data(), un);
  r.get(b.seq_ids.data(), un);
  r.get(b.want_logits.data(), un);
  out.copies.resize(static_cast<size_t>(n_copies));
  for (BlockCopy& c : out.copies) {
    c.group = r.get<int32_t>();
    c.from = r.get<int32_t>();
    c.to = r.get<int32_t>();
  }
  // Table entries first into one vector (pointers into it are taken after,
  // when it no longer grows).
  std::vector<std::map<int32_t, size_t>> where(static_cast<size_t>(n_groups));
  out.table_entries.clear();
  for (int g = 0; g < n_groups; g++) {
    out.place.slots[g].resize(un);
    r.get(out.place.slots[g].data(), un);
    const auto n_seqs = r.get<int64_t>();
    if (n_seqs < 0 || n_seqs > n) throw Error("tensor-parallel step message: bad sequence count");
    for (int64_t s = 0; s < n_seqs; s++) {
      const auto seq = r.get<int32_t>();
      const auto count = r.get<int32_t>();
      if (count < 0 || count > (1 << 24)) throw Error("tensor-parallel step message: bad block-table length");
      where[static_cast<size_t>(g)][seq] = out.table_entries.size();
      out.table_entries.resize(out.table_entries.size() + static_cast<size_t>(count));
      r.get(out.table_entries.data() + out.table_entries.size() - count, static_cast<size_t>(count));
    }
  }
  if (r.at != bytes.size()) throw Error("tensor-parallel step message: bytes left over after its contents");
  for (int g = 0; g < n_groups; g++) {
    out.place.tables[g].resize(un);
    for (size_t i = 0; i < un; i++) {
      const auto& w = where[static_cast<size_t>(g)];
      const auto it = w.find(b.seq_ids[i]);
      if (it == w.end()) throw Error("tensor-parallel step message: a row's sequence has no block table");
      out.place.tables[g][i] = out.table_entries.data() + it->second;
    }
  }
}

}  // namespace kestrel

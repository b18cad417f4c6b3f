#pragma once
// The merge loop both BPE flavours share: split a string into UTF-8
// characters, then repeatedly join the adjacent pair with the best priority
// (ties: the leftmost pair) until no pair has one.
#include <cstddef>
#include <optional>
#include <queue>
#include <string_view>
#include <vector>

#include "tokenizer/utf8.h"

namespace kestrel {

struct MergeSymbol {
  int prev, next;
  size_t start, len;  // byte range in the text
};

// priority(left, right) -> std::optional<double>: higher merges first, nullopt never.
template <typename PriorityFn>
std::vector<MergeSymbol> merge_symbols(std::string_view text, PriorityFn priority) {
  std::vector<MergeSymbol> sym;
  for (size_t pos = 0; pos < text.size();) {
    const size_t n = std::min(utf8_len(static_cast<unsigned char>(text[pos])), text.size() - pos);
    sym.push_back({static_cast<int>(sym.size()) - 1, static_cast<int>(sym.size()) + 1, pos, n});
    pos += n;
  }
  if (sym.empty()) return sym;
  sym.back().next = -1;

  struct Pair {
    int left, right;
    double priority;
    size_t len;
    bool operator<(const Pair& o) const { return priority < o.priority || (priority == o.priority && left > o.left); }
  };
  std::priority_queue<Pair> queue;
  auto try_add = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    if (const std::optional<double> p = priority(sym[l], sym[r])) queue.push({l, r, *p, sym[l].len + sym[r].len});
  };
  for (size_t i = 1; i < sym.size(); i++) try_add(static_cast<int>(i) - 1, static_cast<int>(i));
  while (!queue.empty()) {
    const Pair p = queue.top();
    queue.pop();
    MergeSymbol& l = sym[p.left];
    MergeSymbol& r = sym[p.right];
    if (l.len == 0 || r.len == 0 || l.next != p.right || l.len + r.len != p.len) continue;  // stale
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = p.left;
    try_add(l.prev, p.left);
    try_add(p.left, l.next);
  }
  return sym;
}

// Visits the symbols left after merging, in order.
template <typename Fn>
void for_each_merged(const std::vector<MergeSymbol>& sym, Fn fn) {
  for (int i = sym.empty() ? -1 : 0; i != -1; i = sym[i].next) fn(sym[i]);
}

}  // namespace kestrel

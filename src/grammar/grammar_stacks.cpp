#include "grammar/grammar_stacks.h"

#include <algorithm>

namespace kestrel {

namespace {

// Moves st down to character sets: a rule reference becomes one stack per
// alternative; a finished alternative returns to the rule that referred to it.
void expand(const Grammar& g, GrammarStack st, GrammarStacks& out) {
  const auto& sym = g.symbols();
  while (!st.empty() && sym[st.back()].kind == GrammarSymbol::Kind::End) st.pop_back();
  if (st.empty() || sym[st.back()].kind == GrammarSymbol::Kind::Chars) {
    out.push_back(std::move(st));
    return;
  }
  const uint32_t p = st.back();
  st.pop_back();
  // Where the referring alternative goes on; nothing when the reference ends
  // it (so a repetition, R ::= x R, does not grow the stack).
  if (sym[p + 1].kind != GrammarSymbol::Kind::End) st.push_back(p + 1);
  for (uint32_t alt : g.alternatives(sym[p].index)) {
    GrammarStack next = st;
    next.push_back(alt);
    expand(g, std::move(next), out);
  }
}

void normalize(GrammarStacks& s) {
  std::sort(s.begin(), s.end());
  s.erase(std::unique(s.begin(), s.end()), s.end());
}

}  // namespace

GrammarStacks grammar_start(const Grammar& g) {
  GrammarStacks out;
  for (uint32_t alt : g.alternatives(g.root())) {
    expand(g, GrammarStack{alt}, out);
  }
  normalize(out);
  return out;
}

void grammar_advance(const Grammar& g, const GrammarStacks& in, uint32_t cp, GrammarStacks& out) {
  out.clear();
  const auto& sym = g.symbols();
  for (const GrammarStack& st : in) {
    if (st.empty() || !g.chars(sym[st.back()].index).contains(cp)) continue;
    GrammarStack next = st;
    next.back()++;
    expand(g, std::move(next), out);
  }
  normalize(out);
}

bool grammar_allows_any(const Grammar& g, const GrammarStacks& stacks, uint32_t lo, uint32_t hi) {
  const auto& sym = g.symbols();
  for (const GrammarStack& st : stacks)
    if (!st.empty() && g.chars(sym[st.back()].index).intersects(lo, hi)) return true;
  return false;
}

bool grammar_complete(const GrammarStacks& stacks) {
  // Sorted: the empty stack, if there, comes first.
  return !stacks.empty() && stacks.front().empty();
}

bool grammar_only_end(const GrammarStacks& stacks) { return stacks.size() == 1 && stacks.front().empty(); }

}  // namespace kestrel

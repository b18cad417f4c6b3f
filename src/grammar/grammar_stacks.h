#pragma once
// Where a grammar can be after the text so far: a set of stacks of positions
// in Grammar::symbols() (llama.cpp's matcher, the pushdown automaton of the
// grammar). Each stack's top is the character set the next code point must
// be in; below it, where each enclosing rule goes on. An empty stack means
// the whole grammar matched: the text may end here.
#include <cstdint>
#include <vector>

#include "grammar/grammar.h"

namespace kestrel {

using GrammarStack = std::vector<uint32_t>;
using GrammarStacks = std::vector<GrammarStack>;  // sorted, no duplicates

// Before any text: every way the root rule can start.
GrammarStacks grammar_start(const Grammar& g);
// After one more code point (out is overwritten; empty: the grammar refuses it).
void grammar_advance(const Grammar& g, const GrammarStacks& in, uint32_t cp, GrammarStacks& out);
// Could a code point in [lo, hi] come next? (A token that ends inside a
// multi-byte character allows those its first bytes could become.)
bool grammar_allows_any(const Grammar& g, const GrammarStacks& stacks, uint32_t lo, uint32_t hi);
// The grammar has matched completely (the text may end).
bool grammar_complete(const GrammarStacks& stacks);
// Nothing but the end can follow.
bool grammar_only_end(const GrammarStacks& stacks);

}  // namespace kestrel

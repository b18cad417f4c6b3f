#pragma once
// A context-free grammar over Unicode code points, compiled from GBNF text
// (llama.cpp's grammar format): rules of alternatives of symbols, each symbol
// a set of code points or a reference to a rule. Groups and repetitions
// (x*, x+, x?, x{m,n}) become generated rules, so the matcher only ever sees
// plain sequences. Left recursion is refused at compile time: the matcher
// expands rules depth first and would never stop.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kestrel {

// Code points as sorted, disjoint, inclusive ranges (a negated class is
// stored already complemented).
struct CharClass {
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  bool contains(uint32_t cp) const;
  bool intersects(uint32_t lo, uint32_t hi) const;
};

struct GrammarSymbol {
  enum class Kind : uint8_t { End, Chars, Rule };
  Kind kind = Kind::End;
  uint32_t index = 0;  // a CharClass (Chars) or a rule (Rule)
};

class Grammar {
 public:
  // Throws Error naming the line and column (or the rule) of what is wrong:
  // syntax, an undefined rule, no `root`, left recursion.
  static Grammar parse(std::string_view gbnf, const std::string& root = "root");

  // Every alternative of every rule, one after another, each ended by an End
  // symbol: a matcher position is an index into this.
  const std::vector<GrammarSymbol>& symbols() const { return symbols_; }
  // Where each alternative of a rule starts in symbols().
  const std::vector<uint32_t>& alternatives(uint32_t rule) const { return rule_alts_[rule]; }
  const CharClass& chars(uint32_t i) const { return classes_[i]; }
  uint32_t root() const { return root_; }
  size_t n_rules() const { return rule_alts_.size(); }
  const std::string& rule_name(uint32_t rule) const { return rule_names_[rule]; }

 private:
  friend class GrammarBuilder;
  std::vector<GrammarSymbol> symbols_;
  std::vector<std::vector<uint32_t>> rule_alts_;
  std::vector<std::string> rule_names_;
  std::vector<CharClass> classes_;
  uint32_t root_ = 0;
};

}  // namespace kestrel

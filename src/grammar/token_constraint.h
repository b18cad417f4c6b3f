#pragma once
// A grammar applied to generation, token by token. Before each sampling step
// mask() sends the logits of every token whose bytes the grammar cannot take
// next to -inf; accept() moves the grammar past the token chosen. Which tokens
// are allowed depends only on the grammar's state, so the answer is cached by
// state: a JSON string's characters, the inside of an array, ... are walked
// over the vocabulary once and then looked up.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/grammar_stacks.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {

// The vocabulary as the grammar sees it, built once per tokenizer: each
// token's bytes in the output text, in a trie so that tokens sharing a prefix
// are checked together. Control tokens are spelt out but allowed only to a
// request that shows them as text; the end-of-generation ones are allowed
// where the grammar may end.
class GrammarVocab {
 public:
  explicit GrammarVocab(const Tokenizer& tokenizer);
  int64_t n_vocab() const { return static_cast<int64_t>(bytes_.size()); }
  const std::string& bytes(int32_t token) const { return bytes_[token]; }
  bool is_end(int32_t token) const { return std::binary_search(end_tokens_.begin(), end_tokens_.end(), token); }

  struct Node {
    std::vector<std::pair<uint8_t, uint32_t>> children;
    std::vector<int32_t> tokens;  // tokens whose bytes end here
  };
  const std::vector<Node>& trie() const { return trie_; }
  const std::vector<int32_t>& end_tokens() const { return end_tokens_; }  // sorted
  const std::vector<int32_t>& control_tokens() const { return control_; }  // sorted
  bool is_control(int32_t token) const { return std::binary_search(control_.begin(), control_.end(), token); }

 private:
  std::vector<std::string> bytes_;
  std::vector<int32_t> end_tokens_;
  std::vector<int32_t> control_;
  std::vector<Node> trie_;
};

struct GrammarStats {
  int64_t masks = 0, cache_hits = 0;
  int64_t trie_nodes = 0;   // vocabulary-trie nodes walked (cache misses' work)
  double mask_seconds = 0;  // computing and applying masks
};

class TokenConstraint {
  // A code point being read across a token boundary: its bits so far and how
  // many continuation bytes are still to come.
  struct Partial {
    uint32_t cp = 0;
    int need = 0;  // continuation bytes still to come
    int len = 0;   // the character's length in bytes
  };

 public:
  // shown_control: control tokens this request writes into its text (tool-call
  // markers such as [TOOL_CALLS]); the grammar may match them by spelling.
  TokenConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const GrammarVocab> vocab,
                  std::vector<int32_t> shown_control = {});

  // Sets the logits (a row of n) of the tokens not allowed next to -inf;
  // returns how many are allowed. Ids the tokenizer does not know (a model's
  // padded output rows) are never allowed.
  int64_t mask(float* logits, int64_t n);
  // Whether the token may come next (as mask() would say).
  bool allows(int32_t token);
  // The grammar moves past the token. False (state unchanged) if it may not come.
  bool accept(int32_t token);
  // accept()'s answer without moving: the token's bytes fed one by one, not
  // the trie walk mask() uses (tests hold the two against each other).
  bool would_accept(int32_t token) const;
  // The text so far is a whole match; nothing but the end may follow.
  bool complete() const { return partial_.need == 0 && grammar_complete(stacks_); }
  bool finished() const { return partial_.need == 0 && grammar_only_end(stacks_); }
  const GrammarStats& stats() const { return stats_; }

 private:
  using Bits = std::vector<uint64_t>;
  const Bits& allowed();
  // The walk over the trie goes from state to state by code point; a trie has
  // the same few steps under thousands of prefixes (every letter inside a
  // string), so states are interned and their transitions remembered, across
  // masks too: a step is a hash lookup.
  void walk(uint32_t node, uint32_t state, Partial part, Bits& bits);
  uint32_t intern(GrammarStacks&& stacks);
  int64_t transition(uint32_t state, uint32_t cp);  // -1: refused
  // One byte more: false if the grammar cannot take it. next: the stacks after
  // it (when a code point completed; otherwise stacks stay as they are).
  bool feed(const GrammarStacks& stacks, Partial& part, uint8_t byte, GrammarStacks& next, bool& advanced) const;
  bool may_complete(const GrammarStacks& stacks, const Partial& part) const;
  static bool read_byte(Partial& part, uint8_t b, uint32_t& cp, bool& done);
  // The state after token, from the current one (false: refused).
  bool after(int32_t token, GrammarStacks& stacks, Partial& part) const;
  bool may_use(int32_t token) const;
  static std::string key_of(const GrammarStacks& stacks, const Partial& part);

  std::shared_ptr<const Grammar> g_;
  std::shared_ptr<const GrammarVocab> vocab_;
  GrammarStacks stacks_;
  Partial partial_;
  std::unordered_map<std::string, Bits> cache_;
  std::vector<GrammarStacks> states_;
  std::unordered_map<std::string, uint32_t> state_ids_;
  std::unordered_map<uint64_t, int64_t> transitions_;  // state << 21 | code point -> state or -1
  std::vector<int32_t> shown_control_;  // sorted
  GrammarStats stats_;
};

}  // namespace kestrel

#include "grammar/token_constraint.h"

#include <algorithm>
#include <cmath>

#include "tokenizer/utf8.h"

namespace kestrel {

namespace {
constexpr size_t kMaxCachedStates = 1024;  // x n_vocab bits: 4 MiB for a 32k vocabulary
constexpr size_t kMaxTransitions = size_t{1} << 20;

// A token's bit in a mask.
uint64_t& word_of(std::vector<uint64_t>& bits, int32_t t) { return bits[static_cast<size_t>(t) >> 6]; }
uint64_t bit_of(int64_t t) { return uint64_t{1} << (t & 63); }
bool has(const std::vector<uint64_t>& bits, int64_t t) { return bits[static_cast<size_t>(t) >> 6] & bit_of(t); }
}

GrammarVocab::GrammarVocab(const Tokenizer& tokenizer) {
  const Vocab& v = tokenizer.vocab();
  const auto n = static_cast<int32_t>(v.size());
  bytes_.resize(static_cast<size_t>(n));
  trie_.emplace_back();
  for (int32_t t = 0; t < n; t++) {
    if (v.is_end_of_generation(t)) {
      end_tokens_.push_back(t);
      continue;
    }
    // A control token goes in by its spelling, marked: it is allowed only to
    // requests that write it into their text (tool-call markers).
    if (v.is_control(t)) control_.push_back(t);
    bytes_[t] = tokenizer.token_to_piece(t, v.is_control(t));
    if (bytes_[t].empty()) continue;
    uint32_t node = 0;
    for (unsigned char b : bytes_[t]) {
      auto& kids = trie_[node].children;
      auto it = std::lower_bound(kids.begin(), kids.end(), b,
                                 [](const std::pair<uint8_t, uint32_t>& a, uint8_t k) { return a.first < k; });
      if (it == kids.end() || it->first != b) {
        const auto child = static_cast<uint32_t>(trie_.size());
        kids.insert(it, {b, child});
        trie_.emplace_back();  // (kids may dangle now: not used below)
        node = child;
      } else {
        node = it->second;
      }
    }
    trie_[node].tokens.push_back(t);
  }
}

TokenConstraint::TokenConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const GrammarVocab> vocab,
                                 std::vector<int32_t> shown_control)
    : g_(std::move(grammar)), vocab_(std::move(vocab)), stacks_(grammar_start(*g_)),
      shown_control_(std::move(shown_control)) {
  std::sort(shown_control_.begin(), shown_control_.end());
}

bool TokenConstraint::may_use(int32_t token) const {
  return !vocab_->is_control(token) || std::binary_search(shown_control_.begin(), shown_control_.end(), token);
}

namespace {

// The code points a character of len bytes may be: overlong encodings (a
// '{' spelt in four bytes) and surrogates are not text, whatever a byte-level
// vocabulary can spell.
std::pair<uint32_t, uint32_t> utf8_range(int len) {
  switch (len) {
    case 2: return {0x80, 0x7FF};
    case 3: return {0x800, 0xFFFF};
    default: return {0x10000, 0x10FFFF};
  }
}

}  // namespace

// Could the character begun in part still be one the grammar takes?
bool TokenConstraint::may_complete(const GrammarStacks& stacks, const Partial& part) const {
  const int shift = 6 * part.need;
  auto [lo, hi] = utf8_range(part.len);
  lo = std::max(lo, part.cp << shift);
  hi = std::min(hi, (part.cp << shift) | ((1u << shift) - 1));
  if (part.len == 3 && lo >= 0xD800 && hi <= 0xDFFF) return false;
  return lo <= hi && grammar_allows_any(*g_, stacks, lo, hi);
}

// One byte of UTF-8 into part: false if it cannot be (part of) a character;
// done with cp set when it completes one.
bool TokenConstraint::read_byte(Partial& part, uint8_t b, uint32_t& cp, bool& done) {
  done = false;
  if (part.need == 0) {
    const size_t n = utf8_len(b);
    if (n == 1 && b >= 0x80) return false;  // not the start of a character
    if (n == 1) {
      cp = b;
      done = true;
      return true;
    }
    part = {static_cast<uint32_t>(b & (0x7F >> n)), static_cast<int>(n - 1), static_cast<int>(n)};
    return true;
  }
  if ((b & 0xC0) != 0x80) return false;
  part.cp = (part.cp << 6) | (b & 0x3F);
  if (--part.need > 0) return true;
  cp = part.cp;
  const auto [lo, hi] = utf8_range(part.len);
  part = {};
  if (cp < lo || cp > hi || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
  done = true;
  return true;
}

bool TokenConstraint::feed(const GrammarStacks& stacks, Partial& part, uint8_t b, GrammarStacks& next,
                           bool& advanced) const {
  uint32_t cp = 0;
  advanced = false;
  if (!read_byte(part, b, cp, advanced)) return false;
  if (!advanced) return may_complete(stacks, part);
  grammar_advance(*g_, stacks, cp, next);
  return !next.empty();
}

uint32_t TokenConstraint::intern(GrammarStacks&& stacks) {
  std::string key = key_of(stacks, {});
  auto [it, added] = state_ids_.emplace(std::move(key), static_cast<uint32_t>(states_.size()));
  if (added) states_.push_back(std::move(stacks));
  return it->second;
}

int64_t TokenConstraint::transition(uint32_t state, uint32_t cp) {
  const uint64_t key = (uint64_t{state} << 21) | cp;
  if (auto it = transitions_.find(key); it != transitions_.end()) return it->second;
  GrammarStacks next;
  grammar_advance(*g_, states_[state], cp, next);
  // (Both arms int64_t: with -1 and a uint32_t, -1 would become 4294967295.)
  const int64_t to = next.empty() ? int64_t{-1} : static_cast<int64_t>(intern(std::move(next)));
  transitions_.emplace(key, to);
  return to;
}

void TokenConstraint::walk(uint32_t node, uint32_t state, Partial part, Bits& bits) {
  const auto& trie = vocab_->trie();
  for (const auto& [b, child] : trie[node].children) {
    stats_.trie_nodes++;
    Partial p = part;
    uint32_t next = state;
    uint32_t cp = 0;
    bool done = false;
    if (!read_byte(p, b, cp, done)) continue;
    if (done) {
      const int64_t to = transition(state, cp);
      if (to < 0) continue;
      next = static_cast<uint32_t>(to);
    } else if (!may_complete(states_[state], p)) {
      continue;
    }
    for (int32_t t : trie[child].tokens) word_of(bits, t) |= bit_of(t);
    if (!trie[child].children.empty()) walk(child, next, p, bits);
  }
}

std::string TokenConstraint::key_of(const GrammarStacks& stacks, const Partial& part) {
  std::string key;
  auto put = [&](uint32_t v) { key.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(part.cp);
  put(static_cast<uint32_t>(part.need));
  put(static_cast<uint32_t>(part.len));
  for (const GrammarStack& st : stacks) {
    put(static_cast<uint32_t>(st.size()));
    for (uint32_t p : st) put(p);
  }
  return key;
}

const TokenConstraint::Bits& TokenConstraint::allowed() {
  std::string key = key_of(stacks_, partial_);
  if (auto it = cache_.find(key); it != cache_.end()) {
    stats_.cache_hits++;
    return it->second;
  }
  // Bounded memory: the interned states and their transitions start over when large.
  if (transitions_.size() > kMaxTransitions) {
    transitions_.clear();
    state_ids_.clear();
    states_.clear();
  }
  Bits bits(static_cast<size_t>((vocab_->n_vocab() + 63) / 64), 0);
  walk(0, intern(GrammarStacks(stacks_)), partial_, bits);
  for (int32_t t : vocab_->control_tokens())
    if (!may_use(t)) word_of(bits, t) &= ~bit_of(t);
  if (complete())
    for (int32_t t : vocab_->end_tokens()) word_of(bits, t) |= bit_of(t);
  if (cache_.size() >= kMaxCachedStates) cache_.clear();
  return cache_.emplace(std::move(key), std::move(bits)).first->second;
}

int64_t TokenConstraint::mask(float* logits, int64_t n_logits) {
  const auto t0 = std::chrono::steady_clock::now();
  const Bits& bits = allowed();
  int64_t n_allowed = 0;
  const int64_t n = std::min(n_logits, vocab_->n_vocab());
  for (int64_t i = n; i < n_logits; i++) logits[i] = -INFINITY;
  for (int64_t i = 0; i < n; i++) {
    if (has(bits, i)) {
      n_allowed++;
    } else {
      logits[i] = -INFINITY;
    }
  }
  stats_.masks++;
  stats_.mask_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return n_allowed;
}

bool TokenConstraint::allows(int32_t token) {
  if (token < 0 || token >= vocab_->n_vocab()) return false;
  return has(allowed(), token);
}

bool TokenConstraint::after(int32_t token, GrammarStacks& stacks, Partial& part) const {
  if (token < 0 || token >= vocab_->n_vocab()) return false;
  if (vocab_->is_end(token)) return complete();
  const std::string& bytes = vocab_->bytes(token);
  if (bytes.empty() || !may_use(token)) return false;
  stacks = stacks_;
  part = partial_;
  GrammarStacks next;
  for (unsigned char b : bytes) {
    bool advanced = false;
    if (!feed(stacks, part, b, next, advanced)) return false;
    if (advanced) stacks.swap(next);
  }
  return true;
}

bool TokenConstraint::would_accept(int32_t token) const {
  GrammarStacks stacks;
  Partial part;
  return after(token, stacks, part);
}

bool TokenConstraint::accept(int32_t token) {
  GrammarStacks stacks;
  Partial part;
  if (!after(token, stacks, part)) return false;
  if (!vocab_->is_end(token)) {
    stacks_ = std::move(stacks);
    partial_ = part;
  }
  return true;
}

}  // namespace kestrel

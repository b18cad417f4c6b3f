// GBNF text -> Grammar. The syntax is llama.cpp's (grammars/README.md):
//   name ::= alternative | alternative      # comment
// with "literals" (\n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH escapes), [classes]
// ([^...] negated, a-z ranges), `.` (any character), rule names, ( groups ),
// and * + ? {m} {m,} {m,n} {,n} after any of them. A rule ends at the end of
// its line, except inside parentheses or when the next line starts with `|`.
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <unordered_map>

#include "core/error.h"
#include "grammar/grammar.h"
#include "tokenizer/utf8.h"

namespace kestrel {

namespace {
constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr int kMaxRepetition = 4096;  // x{m,n} becomes up to n rules
}  // namespace

bool CharClass::contains(uint32_t cp) const {
  for (const auto& [lo, hi] : ranges) {
    if (cp < lo) return false;
    if (cp <= hi) return true;
  }
  return false;
}

bool CharClass::intersects(uint32_t lo, uint32_t hi) const {
  for (const auto& [a, b] : ranges)
    if (a <= hi && lo <= b) return true;
  return false;
}

class GrammarBuilder {
 public:
  explicit GrammarBuilder(std::string_view text) : s_(text) {}

  Grammar build(const std::string& root_name) {
    for (;;) {
      skip_space(true);
      if (at_end()) break;
      parse_rule();
    }
    auto root = names_.find(root_name);
    if (root == names_.end() || !rules_[root->second].defined)
      throw Error(fmt::format("no rule '{}' (where generation starts)", root_name));
    for (const Rule& r : rules_)
      if (!r.defined) throw Error(fmt::format("line {}: rule '{}' is used but never defined", r.line, r.name));
    check_left_recursion();
    Grammar g;
    g.root_ = root->second;
    g.classes_ = std::move(classes_);
    for (Rule& r : rules_) {
      g.rule_names_.push_back(r.name);
      std::vector<uint32_t> starts;
      for (const Seq& alt : r.alts) {
        starts.push_back(static_cast<uint32_t>(g.symbols_.size()));
        g.symbols_.insert(g.symbols_.end(), alt.begin(), alt.end());
        g.symbols_.push_back({GrammarSymbol::Kind::End, 0});
      }
      g.rule_alts_.push_back(std::move(starts));
    }
    return g;
  }

 private:
  using Seq = std::vector<GrammarSymbol>;
  struct Rule {
    std::string name;
    std::vector<Seq> alts;
    bool defined = false;
    size_t line = 0;  // of its first mention
  };

  [[noreturn]] void fail(const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); i++) {
      if (s_[i] == '\n') { line++; col = 1; } else { col++; }
    }
    throw Error(fmt::format("line {}, column {}: {}", line, col, what));
  }
  size_t line_now() const { return static_cast<size_t>(std::count(s_.begin(), s_.begin() + static_cast<long>(pos_), '\n')) + 1; }
  bool at_end() const { return pos_ >= s_.size(); }
  char peek(size_t ahead = 0) const { return pos_ + ahead < s_.size() ? s_[pos_ + ahead] : '\0'; }
  static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }

  // Spaces, tabs and comments; newlines too when newline_ok.
  void skip_space(bool newline_ok) {
    while (!at_end()) {
      const char c = peek();
      if (c == ' ' || c == '\t' || c == '\r' || (newline_ok && c == '\n')) {
        pos_++;
      } else if (c == '#') {
        while (!at_end() && peek() != '\n') pos_++;
      } else {
        break;
      }
    }
  }
  // At a newline outside parentheses: does the rule go on (the next line starts with '|')?
  bool continues_on_next_line() {
    size_t save = pos_;
    skip_space(true);
    if (peek() == '|') return true;
    pos_ = save;
    return false;
  }

  uint32_t rule_id(const std::string& name) {
    auto [it, added] = names_.emplace(name, static_cast<uint32_t>(rules_.size()));
    if (added) rules_.push_back({name, {}, false, line_now()});
    return it->second;
  }
  uint32_t new_rule(const std::string& base, std::vector<Seq> alts) {
    std::string name;
    do name = fmt::format("{}-{}", base, ++generated_); while (names_.count(name));
    const uint32_t id = rule_id(name);
    rules_[id].alts = std::move(alts);
    rules_[id].defined = true;
    return id;
  }
  uint32_t class_id(CharClass c) {
    auto key = c.ranges;
    auto [it, added] = class_ids_.emplace(key, static_cast<uint32_t>(classes_.size()));
    if (added) classes_.push_back(std::move(c));
    return it->second;
  }
  GrammarSymbol chars(uint32_t lo, uint32_t hi) { return {GrammarSymbol::Kind::Chars, class_id(CharClass{{{lo, hi}}})}; }

  std::string parse_name() {
    const size_t start = pos_;
    while (!at_end() && is_name_char(peek())) pos_++;
    if (pos_ == start) fail(fmt::format("expected a rule name, found '{}'", std::string(1, peek())));
    return std::string(s_.substr(start, pos_ - start));
  }

  void parse_rule() {
    const std::string name = parse_name();
    skip_space(false);
    if (s_.substr(pos_, 3) != "::=") fail(fmt::format("expected '::=' after '{}'", name));
    pos_ += 3;
    skip_space(true);
    const uint32_t id = rule_id(name);
    if (rules_[id].defined) fail(fmt::format("rule '{}' is defined twice", name));
    rules_[id].defined = true;  // before its body: it may refer to itself
    rules_[id].alts = parse_alternatives(name, 0);
    if (!at_end() && peek() != '\n') fail(fmt::format("unexpected '{}' after rule '{}'", std::string(1, peek()), name));
  }

  std::vector<Seq> parse_alternatives(const std::string& rule, int depth) {
    std::vector<Seq> alts;
    alts.push_back(parse_sequence(rule, depth));
    while (peek() == '|') {
      pos_++;
      skip_space(true);
      alts.push_back(parse_sequence(rule, depth));
    }
    return alts;
  }

  Seq parse_sequence(const std::string& rule, int depth) {
    Seq seq;
    for (;;) {
      skip_space(depth > 0);
      if (depth == 0 && peek() == '\n') {
        continues_on_next_line();  // positions at a '|' that goes on, or stays at the newline
        break;
      }
      const char c = peek();
      if (at_end() || c == '|' || c == ')' || c == '\n') break;
      const size_t item_start = seq.size();
      if (c == '"') {
        pos_++;
        while (peek() != '"') {
          if (at_end() || peek() == '\n') fail("unterminated string literal");
          const uint32_t cp = parse_char();
          seq.push_back(chars(cp, cp));
        }
        pos_++;
      } else if (c == '[') {
        seq.push_back({GrammarSymbol::Kind::Chars, class_id(parse_class())});
      } else if (c == '.') {
        pos_++;
        seq.push_back(chars(0, kMaxCodePoint));
      } else if (c == '(') {
        pos_++;
        skip_space(true);
        auto alts = parse_alternatives(rule, depth + 1);
        skip_space(true);
        if (peek() != ')') fail("expected ')'");
        pos_++;
        seq.push_back({GrammarSymbol::Kind::Rule, new_rule(rule, std::move(alts))});
      } else if (is_name_char(c)) {
        seq.push_back({GrammarSymbol::Kind::Rule, rule_id(parse_name())});
      } else {
        fail(fmt::format("unexpected '{}'", std::string(1, c)));
      }
      skip_space(depth > 0);
      parse_repetition(rule, seq, item_start);
    }
    return seq;
  }

  // * + ? {m,n} after the item that starts at seq[item_start].
  void parse_repetition(const std::string& rule, Seq& seq, size_t item_start) {
    const char c = peek();
    if (c != '*' && c != '+' && c != '?' && c != '{') return;
    if (item_start == seq.size()) fail("a repetition needs something before it");
    Seq item(seq.begin() + static_cast<long>(item_start), seq.end());
    seq.resize(item_start);
    GrammarSymbol x = item.size() == 1 ? item[0] : GrammarSymbol{GrammarSymbol::Kind::Rule, new_rule(rule, {item})};
    int min = 0, max = -1;  // -1: unbounded
    pos_++;
    if (c == '+') min = 1;
    else if (c == '?') max = 1;
    else if (c == '{') {
      skip_space(true);
      auto number = [&] {
        const size_t start = pos_;
        long v = 0;
        while (peek() >= '0' && peek() <= '9') {
          v = v * 10 + (peek() - '0');
          if (v > kMaxRepetition) fail(fmt::format("a repetition count is at most {}", kMaxRepetition));
          pos_++;
        }
        return pos_ == start ? -1 : static_cast<int>(v);
      };
      const int m = number();
      skip_space(true);
      if (peek() == ',') {
        pos_++;
        skip_space(true);
        min = m < 0 ? 0 : m;
        max = number();
      } else {
        if (m < 0) fail("expected a number in {}");
        min = max = m;
      }
      skip_space(true);
      if (peek() != '}') fail("expected '}'");
      pos_++;
      if (max >= 0 && max < min) fail(fmt::format("repetition {{{},{}}}: the maximum is below the minimum", min, max));
    }
    for (int i = 0; i < min; i++) seq.push_back(x);
    if (max < 0) {  // R ::= x R | (empty)
      const uint32_t r = new_rule(rule, {});
      rules_[r].alts = {{x, {GrammarSymbol::Kind::Rule, r}}, {}};
      seq.push_back({GrammarSymbol::Kind::Rule, r});
    } else if (max > min) {  // O_k ::= x O_{k-1} | (empty), O_1 ::= x | (empty)
      uint32_t inner = new_rule(rule, {{x}, {}});
      for (int k = 2; k <= max - min; k++) inner = new_rule(rule, {{x, {GrammarSymbol::Kind::Rule, inner}}, {}});
      seq.push_back({GrammarSymbol::Kind::Rule, inner});
    }
  }

  uint32_t hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
      const char c = peek();
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) fail(fmt::format("expected {} hex digits", digits));
      v = v * 16 + static_cast<uint32_t>(d);
      pos_++;
    }
    if (v > kMaxCodePoint) fail("a code point beyond U+10FFFF");
    return v;
  }

  // One character of a literal or class, escapes resolved, UTF-8 decoded.
  uint32_t parse_char() {
    if (peek() == '\\') {
      pos_++;
      const char e = peek();
      pos_++;
      switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '0': return 0;
        case 'x': return hex(2);
        case 'u': return hex(4);
        case 'U': return hex(8);
        case '\\': case '"': case '[': case ']': case '-': case '^': case '/': case '\'': case '.': case '(': case ')':
        case '{': case '}': case '*': case '+': case '?': case '|':
          return static_cast<unsigned char>(e);
        default: pos_--; fail(fmt::format("unknown escape '\\{}'", std::string(1, e)));
      }
    }
    const auto lead = static_cast<unsigned char>(peek());
    if (utf8_len(lead) == 1 && lead >= 0x80) fail("invalid UTF-8");
    return utf8_next(s_, pos_);
  }

  CharClass parse_class() {
    pos_++;  // '['
    const bool negated = peek() == '^';
    if (negated) pos_++;
    std::vector<std::pair<uint32_t, uint32_t>> r;
    while (peek() != ']') {
      if (at_end() || peek() == '\n') fail("unterminated character class");
      const uint32_t lo = parse_char();
      uint32_t hi = lo;
      if (peek() == '-' && peek(1) != ']') {
        pos_++;
        if (at_end()) fail("unterminated character class");
        hi = parse_char();
        if (hi < lo) fail("a character range that goes backwards");
      }
      r.emplace_back(lo, hi);
    }
    pos_++;
    std::sort(r.begin(), r.end());
    CharClass merged;
    for (const auto& [lo, hi] : r) {
      if (!merged.ranges.empty() && lo <= merged.ranges.back().second + 1)
        merged.ranges.back().second = std::max(merged.ranges.back().second, hi);
      else
        merged.ranges.emplace_back(lo, hi);
    }
    if (!negated) return merged;
    CharClass complement;
    uint32_t next = 0;
    for (const auto& [lo, hi] : merged.ranges) {
      if (lo > next) complement.ranges.emplace_back(next, lo - 1);
      next = hi + 1;
    }
    if (next <= kMaxCodePoint) complement.ranges.emplace_back(next, kMaxCodePoint);
    if (complement.ranges.empty()) fail("a negated class that matches nothing");
    return complement;
  }

  // A rule that can reach itself without consuming a character would send the
  // matcher's depth-first expansion round forever.
  void check_left_recursion() const {
    const size_t n = rules_.size();
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; r++) {
        if (nullable[r]) continue;
        for (const Seq& alt : rules_[r].alts) {
          const bool all = std::all_of(alt.begin(), alt.end(), [&](const GrammarSymbol& s) {
            return s.kind == GrammarSymbol::Kind::Rule && nullable[s.index];
          });
          if (all) { nullable[r] = changed = true; break; }
        }
      }
    }
    std::vector<std::vector<uint32_t>> left(n);  // rules reachable at the left edge
    for (size_t r = 0; r < n; r++)
      for (const Seq& alt : rules_[r].alts)
        for (const GrammarSymbol& s : alt) {
          if (s.kind != GrammarSymbol::Kind::Rule) break;
          left[r].push_back(s.index);
          if (!nullable[s.index]) break;
        }
    std::vector<int> state(n, 0);  // 0 new, 1 on the path, 2 done
    std::vector<uint32_t> path;
    std::function<void(uint32_t)> visit = [&](uint32_t r) {
      state[r] = 1;
      path.push_back(r);
      for (uint32_t t : left[r]) {
        if (state[t] == 1) {
          std::string chain;
          for (auto it = std::find(path.begin(), path.end(), t); it != path.end(); ++it) chain += rules_[*it].name + " -> ";
          throw Error(fmt::format("left recursion ({}{}): a rule must match a character before it "
                                  "comes back to itself",
                                  chain, rules_[t].name));
        }
        if (state[t] == 0) visit(t);
      }
      path.pop_back();
      state[r] = 2;
    };
    for (uint32_t r = 0; r < n; r++)
      if (state[r] == 0) visit(r);
  }

  std::string_view s_;
  size_t pos_ = 0;
  std::vector<Rule> rules_;
  std::unordered_map<std::string, uint32_t> names_;
  std::vector<CharClass> classes_;
  std::map<std::vector<std::pair<uint32_t, uint32_t>>, uint32_t> class_ids_;
  int generated_ = 0;
};

Grammar Grammar::parse(std::string_view gbnf, const std::string& root) { return GrammarBuilder(gbnf).build(root); }

}  // namespace kestrel

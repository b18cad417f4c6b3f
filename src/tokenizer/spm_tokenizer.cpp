#include "tokenizer/spm_tokenizer.h"

#include <fmt/format.h>

#include <cctype>
#include <queue>

#include "tokenizer/utf8.h"

namespace kestrel {
namespace {

const std::string kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's word marker

struct Symbol {
  int prev, next;
  size_t start, len;
};

struct Bigram {
  int left, right;
  float score;
  size_t len;
  // Highest score first; on ties, the leftmost pair.
  bool operator<(const Bigram& o) const { return score < o.score || (score == o.score && left > o.left); }
};

}  // namespace

void SpmTokenizer::encode_text(std::string_view raw, bool after_special, std::vector<int32_t>& out) const {
  std::string text;
  if (vocab_.add_space_prefix && after_special) text = kSpace;
  for (char c : raw) {
    if (c == ' ') text += kSpace;
    else text += c;
  }
  if (text.empty()) return;

  std::vector<Symbol> sym;
  for (size_t pos = 0; pos < text.size();) {
    const size_t n = std::min(utf8_len(static_cast<unsigned char>(text[pos])), text.size() - pos);
    sym.push_back({static_cast<int>(sym.size()) - 1, static_cast<int>(sym.size()) + 1, pos, n});
    pos += n;
  }
  sym.back().next = -1;

  std::priority_queue<Bigram> queue;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const std::string merged = text.substr(sym[left].start, sym[left].len + sym[right].len);
    const int32_t id = vocab_.find(merged);
    if (id < 0) return;
    queue.push({left, right, vocab_.scores[id], merged.size()});
  };
  for (size_t i = 1; i < sym.size(); i++) try_add(static_cast<int>(i) - 1, static_cast<int>(i));

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = sym[b.left];
    Symbol& r = sym[b.right];
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.len) continue;  // stale
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  // Every merged symbol is a piece (only pairs that form a piece are queued),
  // so what has no piece is a single character: it falls back to bytes.
  for (int i = 0; i != -1; i = sym[i].next) {
    const std::string s = text.substr(sym[i].start, sym[i].len);
    const int32_t id = vocab_.find(s);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (unsigned char c : s) {
      const int32_t bid = vocab_.find(fmt::format("<0x{:02X}>", c));
      out.push_back(bid >= 0 ? bid : vocab_.unk);
    }
  }
}

std::string SpmTokenizer::piece_bytes(int32_t id) const {
  const std::string& t = vocab_.tokens[id];
  if (vocab_.types[id] == TokenType::Byte && t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' &&
      std::isxdigit(static_cast<unsigned char>(t[3])) && std::isxdigit(static_cast<unsigned char>(t[4]))) {
    return std::string(1, static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
  }
  std::string s;
  for (size_t i = 0; i < t.size();) {
    if (t.compare(i, kSpace.size(), kSpace) == 0) { s += ' '; i += kSpace.size(); }
    else s += t[i++];
  }
  return s;
}

}  // namespace kestrel

#include "tokenizer/bpe_tokenizer.h"

#include <queue>

#include "tokenizer/utf8.h"

namespace kestrel {

BpeTokenizer::BpeTokenizer(Vocab v) : Tokenizer(std::move(v)), pre_(vocab_.pre) {
  // GPT-2's bytes_to_unicode: printable bytes stand for themselves, the rest
  // are shifted to code points 256 and up, in byte order.
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; b++) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const uint32_t cp = printable ? b : next++;
    byte_char_[b] = utf8_encode(cp);
    char_byte_[cp] = static_cast<uint8_t>(b);
  }
}

namespace {

struct Symbol {
  int prev, next;
  size_t start, len;
};

struct Bigram {
  int left, right;
  int32_t rank;
  size_t len;
  // Lowest rank first; on ties, the leftmost pair.
  bool operator<(const Bigram& o) const { return rank > o.rank || (rank == o.rank && left > o.left); }
};

}  // namespace

void BpeTokenizer::encode_text(std::string_view text, bool, std::vector<int32_t>& out) const {
  for (std::string_view word_bytes : pre_.split(text)) {
    std::string word;
    for (unsigned char c : word_bytes) word += byte_char_[c];
    if (pre_.ignore_merges()) {
      if (const int32_t id = vocab_.find(word); id >= 0) {
        out.push_back(id);
        continue;
      }
    }
    std::vector<Symbol> sym;
    for (size_t pos = 0; pos < word.size();) {
      const size_t n = std::min(utf8_len(static_cast<unsigned char>(word[pos])), word.size() - pos);
      sym.push_back({static_cast<int>(sym.size()) - 1, static_cast<int>(sym.size()) + 1, pos, n});
      pos += n;
    }
    if (sym.empty()) continue;
    sym.back().next = -1;

    std::priority_queue<Bigram> queue;
    auto try_add = [&](int l, int r) {
      if (l < 0 || r < 0) return;
      std::string key = word.substr(sym[l].start, sym[l].len);
      key += ' ';
      key.append(word, sym[r].start, sym[r].len);
      auto it = vocab_.merge_rank.find(key);
      if (it == vocab_.merge_rank.end()) return;
      queue.push({l, r, it->second, sym[l].len + sym[r].len});
    };
    for (size_t i = 1; i < sym.size(); i++) try_add(static_cast<int>(i) - 1, static_cast<int>(i));
    while (!queue.empty()) {
      const Bigram b = queue.top();
      queue.pop();
      Symbol& l = sym[b.left];
      Symbol& r = sym[b.right];
      if (l.len == 0 || r.len == 0 || l.len + r.len != b.len || l.next != b.right) continue;  // stale
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) sym[r.next].prev = b.left;
      try_add(l.prev, b.left);
      try_add(b.left, l.next);
    }
    for (int i = 0; i != -1; i = sym[i].next) {
      const std::string s = word.substr(sym[i].start, sym[i].len);
      if (const int32_t id = vocab_.find(s); id >= 0) {
        out.push_back(id);
        continue;
      }
      // No token for this symbol: emit its characters one by one.
      for (size_t p = 0; p < s.size();) {
        const size_t n = utf8_len(static_cast<unsigned char>(s[p]));
        const int32_t id = vocab_.find(s.substr(p, n));
        if (id >= 0) out.push_back(id);
        else if (vocab_.unk >= 0) out.push_back(vocab_.unk);
        p += n;
      }
    }
  }
}

std::string BpeTokenizer::piece_bytes(int32_t id) const {
  const std::string& t = vocab_.tokens[id];
  std::string out;
  for (size_t pos = 0; pos < t.size();) {
    const size_t start = pos;
    const uint32_t cp = utf8_next(t, pos);
    auto it = char_byte_.find(cp);
    if (it != char_byte_.end()) out += static_cast<char>(it->second);
    else out.append(t, start, pos - start);
  }
  return out;
}

}  // namespace kestrel

#include "tokenizer/bpe_tokenizer.h"

#include <fmt/format.h>


#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/symbol_merge.h"

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

const char* const kSpace = "\xe2\x96\x81";  // U+2581, SentencePiece's space

}  // namespace

void BpeTokenizer::encode_text(std::string_view raw, bool, std::vector<int32_t>& out) const {
  std::string escaped;
  if (vocab_.spm_style_bpe)
    for (char c : raw) c == ' ' ? escaped += kSpace : escaped += c;
  const std::string_view text = vocab_.spm_style_bpe ? std::string_view(escaped) : raw;
  for (std::string_view word_bytes : pre_.split(text)) {
    std::string word;
    if (vocab_.spm_style_bpe)
      word = word_bytes;
    else
      for (unsigned char c : word_bytes) word += byte_char_[c];
    // Gemma 4: a run of newlines that is a token is taken whole (llama.cpp's rule).
    if (vocab_.spm_style_bpe && word.find_first_not_of('\n') == std::string::npos) {
      if (const int32_t id = vocab_.find(word); id >= 0) {
        out.push_back(id);
        continue;
      }
    }
    if (pre_.ignore_merges()) {
      if (const int32_t id = vocab_.find(word); id >= 0) {
        out.push_back(id);
        continue;
      }
    }
    std::string key;
    const auto sym = merge_symbols(word, [&](const MergeSymbol& l, const MergeSymbol& r) -> std::optional<double> {
      key.assign(word, l.start, l.len);
      key += ' ';
      key.append(word, r.start, r.len);
      auto it = vocab_.merge_rank.find(key);
      if (it == vocab_.merge_rank.end()) return std::nullopt;
      return -static_cast<double>(it->second);  // lowest rank first
    });
    for_each_merged(sym, [&](const MergeSymbol& m) {
      const std::string s = word.substr(m.start, m.len);
      if (const int32_t id = vocab_.find(s); id >= 0) {
        out.push_back(id);
        return;
      }
      // No token for this symbol: its bytes as <0xXX> tokens (Gemma 4), or its characters one by one.
      if (vocab_.spm_style_bpe) {
        for (unsigned char c : s)
          if (const int32_t id = vocab_.find(fmt::format("<0x{:02X}>", c)); id >= 0) out.push_back(id);
        return;
      }
      for (size_t p = 0; p < s.size();) {
        const size_t n = utf8_len(static_cast<unsigned char>(s[p]));
        const int32_t id = vocab_.find(s.substr(p, n));
        if (id >= 0) out.push_back(id);
        else if (vocab_.unk >= 0) out.push_back(vocab_.unk);
        p += n;
      }
    });
  }
}

std::string BpeTokenizer::piece_bytes(int32_t id) const {
  const std::string& t = vocab_.tokens[id];
  std::string out;
  if (vocab_.spm_style_bpe) return sentencepiece_bytes(vocab_, id);
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

#include "tokenizer/spm_tokenizer.h"

#include <fmt/format.h>

#include <cctype>

#include "tokenizer/symbol_merge.h"

namespace kestrel {
namespace {

const std::string kWordMarker = "\xE2\x96\x81";  // U+2581, SentencePiece's word marker

}  // namespace

void SpmTokenizer::encode_text(std::string_view raw, bool after_special, std::vector<int32_t>& out) const {
  std::string text;
  if (vocab_.add_space_prefix && after_special) text = kWordMarker;
  for (char c : raw) {
    if (c == ' ')
      text += kWordMarker;
    else text += c;
  }
  if (text.empty()) return;

  const auto sym = merge_symbols(text, [&](const MergeSymbol& l, const MergeSymbol& r) -> std::optional<double> {
    const int32_t id = vocab_.find(text.substr(l.start, l.len + r.len));
    if (id < 0) return std::nullopt;
    return vocab_.scores[id];
  });
  // Every merged symbol is a piece (only pairs that form a piece merge), so
  // what has no piece is a single character: it falls back to bytes.
  for_each_merged(sym, [&](const MergeSymbol& m) {
    const std::string s = text.substr(m.start, m.len);
    if (const int32_t id = vocab_.find(s); id >= 0) {
      out.push_back(id);
      return;
    }
    for (unsigned char c : s) {
      const int32_t bid = vocab_.find(fmt::format("<0x{:02X}>", c));
      out.push_back(bid >= 0 ? bid : vocab_.unk);
    }
  });
}

std::string SpmTokenizer::piece_bytes(int32_t id) const { return sentencepiece_bytes(vocab_, id); }

std::string sentencepiece_bytes(const Vocab& v, int32_t id) {
  const std::string& t = v.tokens[id];
  if (v.types[id] == TokenType::Byte && t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' &&
      std::isxdigit(static_cast<unsigned char>(t[3])) && std::isxdigit(static_cast<unsigned char>(t[4]))) {
    return std::string(1, static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
  }
  std::string s;
  for (size_t i = 0; i < t.size();) {
    if (t.compare(i, kWordMarker.size(), kWordMarker) == 0) {
      s += ' ';
      i += kWordMarker.size();
    } else
      s += t[i++];
  }
  return s;
}

}  // namespace kestrel

#include "tokenizer/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/spm_tokenizer.h"

namespace kestrel {

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile& file) {
  Vocab v = Vocab::from_gguf(file);
  if (v.kind == Vocab::Kind::Spm) return std::make_unique<SpmTokenizer>(std::move(v));
  return std::make_unique<BpeTokenizer>(std::move(v));
}

Tokenizer::Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) {
  for (int32_t i = 0; i < vocab_.size(); i++) {
    max_token_text_bytes_ = std::max(max_token_text_bytes_, vocab_.tokens[i].size());
    const TokenType t = vocab_.types[i];
    if (!vocab_.tokens[i].empty() && (t == TokenType::UserDefined || t == TokenType::Control))
      special_by_byte_[static_cast<unsigned char>(vocab_.tokens[i][0])].push_back(i);
  }
  for (auto& bucket : special_by_byte_)
    std::stable_sort(bucket.begin(), bucket.end(),
                     [&](int32_t a, int32_t b) { return vocab_.tokens[a].size() > vocab_.tokens[b].size(); });
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  return encode_impl(text, add_special, parse_special, nullptr);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, const std::vector<TextSpan>& plain) const {
  return encode_impl(text, add_special, true, &plain);
}

std::vector<int32_t> Tokenizer::encode_impl(std::string_view text, bool add_special, bool parse_special,
                                            const std::vector<TextSpan>* plain) const {
  std::vector<int32_t> out;
  if (add_special && vocab_.add_bos) out.push_back(vocab_.bos);
  bool after_special = true;
  size_t start = 0, i = 0;
  size_t next_plain = 0;  // the first plain span that does not end at or before i
  // Whether [from, to) overlaps a plain span (spans sorted; i only grows).
  auto touches_plain = [&](size_t from, size_t to) {
    if (!plain) return false;
    while (next_plain < plain->size() && (*plain)[next_plain].end <= from) next_plain++;
    return next_plain < plain->size() && (*plain)[next_plain].begin < to;
  };
  while (i < text.size()) {
    int32_t hit = -1;
    for (int32_t id : special_by_byte_[static_cast<unsigned char>(text[i])]) {
      const std::string& s = vocab_.tokens[id];
      if (vocab_.types[id] == TokenType::Control && (!parse_special || touches_plain(i, i + s.size()))) continue;
      if (text.compare(i, s.size(), s) == 0) { hit = id; break; }
    }
    if (hit < 0) { i++; continue; }
    if (i > start) encode_text(text.substr(start, i - start), after_special, out);
    out.push_back(hit);
    after_special = true;
    i += vocab_.tokens[hit].size();
    start = i;
  }
  if (start < text.size()) encode_text(text.substr(start), after_special, out);
  if (add_special && vocab_.add_eos && vocab_.eos >= 0) out.push_back(vocab_.eos);
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id, bool render_special) const {
  if (id < 0 || id >= vocab_.size()) throw Error(fmt::format("token id {} is outside the vocabulary (0..{})", id, vocab_.size() - 1));
  const TokenType t = vocab_.types[id];
  if (t == TokenType::Control || t == TokenType::Unknown || t == TokenType::Unused) {
    return render_special ? vocab_.tokens[id] : std::string();
  }
  if (t == TokenType::UserDefined) return vocab_.tokens[id];
  return piece_bytes(id);
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool render_special) const {
  std::string s;
  for (int32_t id : ids) s += token_to_piece(id, render_special);
  return s;
}

}  // namespace kestrel

#pragma once
// Text <-> token ids, from a GGUF's tokenizer metadata.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/vocab.h"

namespace kestrel {

// A byte range [begin, end) of a text.
struct TextSpan {
  size_t begin = 0, end = 0;
};

class Tokenizer {
 public:
  static std::unique_ptr<Tokenizer> from_gguf(const GgufFile& file);
  explicit Tokenizer(Vocab vocab);
  virtual ~Tokenizer() = default;

  // add_special: BOS/EOS as the vocabulary asks. parse_special: text such as
  // "<s>" becomes the control token instead of being tokenized as characters.
  // User-defined tokens are always matched as whole tokens.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;
  // The same, but control tokens are recognised only outside `plain` (sorted,
  // disjoint spans): a chat's message content stays text even where it spells
  // a control token, while the template around it keeps its markers.
  std::vector<int32_t> encode(std::string_view text, bool add_special, const std::vector<TextSpan>& plain) const;

  // The bytes a token stands for (not necessarily valid UTF-8 on its own).
  // Control tokens give "" unless render_special.
  std::string token_to_piece(int32_t id, bool render_special = false) const;
  std::string decode(const std::vector<int32_t>& ids, bool render_special = false) const;

  const Vocab& vocab() const { return vocab_; }
  // The most input bytes one token can stand for: no piece's stored text is
  // shorter than the input it covers (SentencePiece's "▁" is 3 bytes for a
  // space, byte-level BPE stores each byte as 1-2, byte tokens "<0x41>" are
  // 6), and an unknown character (at most 4 bytes) is one token. So a text
  // of n bytes has at least n / max_token_text_bytes() tokens: a prompt can
  // be refused as too long before it is tokenized.
  size_t max_token_text_bytes() const { return max_token_text_bytes_; }

 protected:
  // Encodes plain text (no special tokens inside).
  // after_special: the text starts the input or follows a special token (where SentencePiece adds its dummy prefix).
  virtual void encode_text(std::string_view text, bool after_special, std::vector<int32_t>& out) const = 0;
  virtual std::string piece_bytes(int32_t id) const = 0;

  Vocab vocab_;

 private:
  std::vector<int32_t> encode_impl(std::string_view text, bool add_special, bool parse_special,
                                   const std::vector<TextSpan>* plain) const;
  // Tokens matched literally in text, bucketed by first byte, longest first.
  std::vector<int32_t> special_by_byte_[256];
  size_t max_token_text_bytes_ = 4;
};

}  // namespace kestrel

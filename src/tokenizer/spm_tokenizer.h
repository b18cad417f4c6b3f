#pragma once
#include "tokenizer/tokenizer.h"

namespace kestrel {

// SentencePiece-style BPE over scored pieces (GGUF tokenizer.ggml.model =
// "llama"): spaces become U+2581, a dummy-prefix space starts the text, the
// adjacent pair whose merged piece scores highest merges first, and
// characters with no piece fall back to <0xXX> byte tokens.
class SpmTokenizer final : public Tokenizer {
 public:
  explicit SpmTokenizer(Vocab v) : Tokenizer(std::move(v)) {}

 protected:
  void encode_text(std::string_view text, bool after_special, std::vector<int32_t>& out) const override;
  std::string piece_bytes(int32_t id) const override;
};

// A SentencePiece-style piece's bytes: a <0xXX> byte token's byte, else its text with U+2581 as spaces (also
// Gemma 4's BPE pieces).
std::string sentencepiece_bytes(const Vocab& v, int32_t id);

}  // namespace kestrel

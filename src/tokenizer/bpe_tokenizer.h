#pragma once
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {

// Byte-level BPE (GGUF tokenizer.ggml.model = "gpt2"): pre-tokenize, map
// each byte to its printable stand-in (GPT-2's bytes_to_unicode), then apply
// merges in rank order. Gemma 4's ("gemma4", Vocab::spm_style_bpe): spaces as U+2581, the raw UTF-8 merged,
// a run of newlines that is a token taken whole, bytes without a token as <0xXX>.
class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(Vocab v);

 protected:
  void encode_text(std::string_view text, bool after_special, std::vector<int32_t>& out) const override;
  std::string piece_bytes(int32_t id) const override;

 private:
  PreTokenizer pre_;
  std::string byte_char_[256];                  // byte -> UTF-8 of its stand-in
  std::unordered_map<uint32_t, uint8_t> char_byte_;  // stand-in code point -> byte
};

}  // namespace kestrel

#pragma once
// The tokenizer's data as GGUF stores it (tokenizer.ggml.*), validated.
#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "gguf/gguf.h"

namespace kestrel {

// GGUF token types (llama.cpp's llama_token_type).
enum class TokenType : int32_t { Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

struct Vocab {
  enum class Kind { Spm, Bpe };
  Kind kind = Kind::Spm;
  std::string pre;  // tokenizer.ggml.pre (BPE pre-tokenizer rules)
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<TokenType> types;
  std::unordered_map<std::string, int32_t> token_to_id;
  std::unordered_map<std::string, int32_t> merge_rank;  // "left right" -> rank (BPE)
  int32_t bos = -1, eos = -1, unk = -1, eot = -1;
  // Fill-in-the-middle: tokenizer.ggml.fim_{pre,suf,mid,pad,rep,sep}_token_id, or found by their text
  // (<|fim_prefix|>, <｜fim▁begin｜>, <PRE>, ...) as llama.cpp finds them; -1 when the model has none.
  int32_t fim_pre = -1, fim_suf = -1, fim_mid = -1, fim_pad = -1, fim_rep = -1, fim_sep = -1;
  bool add_bos = false, add_eos = false, add_space_prefix = true;
  // tokenizer.ggml.model "gemma4": BPE on raw UTF-8 (no GPT-2 byte stand-ins) with spaces written as U+2581 and
  // bytes without a token as <0xXX> byte tokens, SentencePiece-style.
  bool spm_style_bpe = false;

  static Vocab from_gguf(const GgufFile& file);
  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
  int32_t find(const std::string& piece) const {
    auto it = token_to_id.find(piece);
    return it == token_to_id.end() ? -1 : it->second;
  }
  bool is_control(int32_t id) const { return types[id] == TokenType::Control; }
  // Tokens that end generation (sorted): EOS, EOT, EOM and the families' end-of-turn markers
  // (vocab.cpp lists them, as llama.cpp does).
  std::vector<int32_t> end_of_generation;
  // Those, and a generated BOS, which starts a new document (llama2.c's rule;
  // TinyStories models end stories that way).
  bool is_end_of_generation(int32_t id) const {
    return id == eos || (bos >= 0 && id == bos) ||
           std::binary_search(end_of_generation.begin(), end_of_generation.end(), id);
  }
};

}  // namespace kestrel

#pragma once
// Byte-level BPE pre-tokenizers: the text is split by a sequence of regexes
// (Hugging Face "Split ... Isolated" semantics: each regex splits every
// current piece into its matches and the gaps between them). Regexes are
// Unicode-aware via PCRE2 and chosen by GGUF's tokenizer.ggml.pre.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kestrel {

class PreTokenizer {
 public:
  // Throws Error naming the rule set if it is unknown.
  explicit PreTokenizer(const std::string& pre);
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;

  // Pieces as views into text, in order, covering it completely.
  std::vector<std::string_view> split(std::string_view text) const;

  // Whether a word that is itself a token skips BPE merges (llama3-style).
  bool ignore_merges() const { return ignore_merges_; }
  // Whether models with this rule set add BOS when the file does not say
  // (Llama 3, Tekken; llama.cpp's defaults). False for unknown names.
  static bool adds_bos_by_default(const std::string& pre);
  // Whether llama.cpp never adds BOS for this rule set, whatever tokenizer.ggml.add_bos_token says (GLM-4).
  static bool never_adds_bos(const std::string& pre);

  static std::vector<std::string> known_names();

 private:
  struct Compiled;
  std::vector<std::unique_ptr<Compiled>> regexes_;
  bool ignore_merges_ = false;
};

}  // namespace kestrel

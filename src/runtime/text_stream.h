#pragma once
// Generated token ids in, text out as it becomes final: whole UTF-8
// characters only, SentencePiece's dummy-prefix space dropped after BOS, and
// text held back while it might be the start of a stop string (the output
// ends before the first stop string). Used by `run` and by the server.
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace kestrel {

class TextStream {
 public:
  // prev_token: the token before the first generated one (the prompt's last).
  // shown_control: control tokens written into the text as their spelling
  // (tool-call markers such as <|python_tag|> that a reply parser reads).
  TextStream(const Tokenizer& tokenizer, std::vector<std::string> stops, int32_t prev_token,
             std::vector<int32_t> shown_control = {});

  // The text that token makes final. stopped: a stop string completed (the
  // text returned ends before it; nothing more should be generated).
  std::string push(int32_t token, bool& stopped);
  // At the end of generation: whatever was held back (unless it completes a stop string).
  std::string finish(bool& stopped);
  // The stop string that ended the text ("" while none has).
  const std::string& matched_stop() const { return matched_; }

 private:
  std::string filter(const std::string& text, bool& stopped);

  const Tokenizer& tok_;
  std::vector<std::string> stops_;
  std::vector<int32_t> shown_control_;
  int32_t prev_;
  bool strip_leading_space_;
  Utf8Stream utf8_;
  std::string pending_;
  std::string matched_;
};

}  // namespace kestrel

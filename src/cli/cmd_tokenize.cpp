// kestrel tokenize -m MODEL "text": ids (and pieces) of a text.
#include <fmt/format.h>

#include "cli/commands.h"
#include "gguf/gguf.h"
#include "runtime/loaded_model.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {

void register_tokenize(CLI::App& app) {
  static std::string model, tokenizer_bin, text;
  static bool pieces = false, no_bos = false, parse_special = false;
  auto* cmd = add_command(app, "tokenize", "Print the token ids of a text", [] {
    const auto file = open_model_file(model, tokenizer_bin);
    const auto tok = Tokenizer::from_gguf(*file);
    const auto ids = tok->encode(text, !no_bos, parse_special);
    if (!pieces) {
      std::string line;
      for (size_t i = 0; i < ids.size(); i++) line += (i ? " " : "") + std::to_string(ids[i]);
      fmt::print("{}\n", line);
      return 0;
    }
    for (int32_t id : ids) {
      std::string shown;
      for (char c : tok->token_to_piece(id, true)) {
        if (c == '\n') shown += "\\n";
        else if (c == '\t') shown += "\\t";
        else shown += c;
      }
      fmt::print("{:>8} '{}'\n", id, shown);
    }
    return 0;
  });
  cmd->add_option("-m,--model", model, "GGUF model (or llama2.c checkpoint with --tokenizer)")->required();
  cmd->add_option("--tokenizer", tokenizer_bin, "llama2.c tokenizer.bin (when -m is a llama2.c checkpoint)");
  cmd->add_option("text", text, "Text to tokenize")->required();
  cmd->add_flag("--pieces", pieces, "Print each id with its piece");
  cmd->add_flag("--no-bos", no_bos, "Do not add BOS/EOS even if the vocabulary asks for them");
  cmd->add_flag("--parse-special", parse_special, "Turn special-token text such as <s> into its token");
}

}  // namespace kestrel::cli

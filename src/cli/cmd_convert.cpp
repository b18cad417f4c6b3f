// kestrel convert --llama2c CHECKPOINT --tokenizer TOKENIZER.bin -o OUT.gguf
#include <fmt/format.h>

#include "cli/commands.h"
#include "formats/block_formats.h"
#include "core/error.h"
#include "gguf/llama2c_import.h"

namespace kestrel::cli {

void register_convert(CLI::App& app) {
  static std::string checkpoint, tokenizer, out, type_name_str = "f32", name = "llama2c";
  auto* cmd = add_command(app, "convert", "Import a llama2.c checkpoint and tokenizer into GGUF", [] {
    const auto type = type_from_name(type_name_str);
    if (!type || !can_quantize_to(*type))
      throw Error(fmt::format("--type '{}' is not one of {}", type_name_str, kWritableTypes));
    const MappedFile ckpt = MappedFile::open(checkpoint);
    const MappedFile tok = MappedFile::open(tokenizer);
    Llama2cOptions opt;
    opt.type = *type;
    opt.name = name;
    opt.on_fallback = [](const std::string& tensor, GgmlType fallback) {
      fmt::print(stderr, "convert: {} rows do not divide into {}-element blocks; stored as {}\n", tensor,
                 traits(GgmlType::Q8_0).block_size, type_name(fallback));
    };
    const GgufWriter w = llama2c_to_gguf(ckpt, tok, opt);
    w.write_file(out);
    fmt::print("wrote {}\n", out);
    return 0;
  });
  cmd->add_option("--llama2c", checkpoint, "llama2.c checkpoint (version 0 layout)")->required();
  cmd->add_option("--tokenizer", tokenizer, "llama2.c tokenizer.bin")->required();
  cmd->add_option("-o,--output", out, "GGUF file to write")->required();
  cmd->add_option("--type", type_name_str, std::string("Type of 2-D weights: ") + kWritableTypes)->capture_default_str();
  cmd->add_option("--name", name, "general.name to record")->capture_default_str();
}

}  // namespace kestrel::cli

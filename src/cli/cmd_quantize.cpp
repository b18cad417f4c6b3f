// kestrel quantize IN.gguf OUT.gguf --type q8_0
#include <fmt/format.h>

#include <filesystem>

#include "cli/commands.h"
#include "core/block_formats.h"
#include "core/error.h"
#include "model/requantize.h"
#include "runtime/engine.h"

namespace kestrel::cli {

void register_quantize(CLI::App& app) {
  static std::string in_path, out_path, type_str = "q8_0";
  static int threads = 0;
  auto* cmd = add_command(app, "quantize", "Rewrite a GGUF model's matrices in another type (round to nearest)", [] {
    const auto type = type_from_name(type_str);
    if (!type || !can_quantize_to(*type))
      throw Error(
          fmt::format("--type '{}' is not one of {}", type_str, kWritableTypes));
    if (std::filesystem::exists(out_path) && std::filesystem::equivalent(in_path, out_path))
      throw Error("the output would overwrite the input");
    const GgufFile in = GgufFile::open(in_path);
    RequantizeOptions o;
    o.type = *type;
    o.n_threads = threads > 0 ? threads : default_thread_count();
    o.on_fallback = [](const std::string& tensor, GgmlType used) {
      fmt::print(stderr, "quantize: {} rows do not divide into the type's blocks; stored as {}\n", tensor,
                 type_name(used));
    };
    requantize(in, o).write_file(out_path);
    fmt::print("wrote {} ({}, {:.1f} MiB from {:.1f} MiB)\n", out_path, type_name(*type),
               static_cast<double>(std::filesystem::file_size(out_path)) / (1 << 20),
               static_cast<double>(std::filesystem::file_size(in_path)) / (1 << 20));
    return 0;
  });
  cmd->add_option("input", in_path, "GGUF model to read")->required();
  cmd->add_option("output", out_path, "GGUF file to write")->required();
  cmd->add_option("--type", type_str, kWritableTypes)->capture_default_str();
  cmd->add_option("-t,--threads", threads, "Threads (0: all cores)");
}

}  // namespace kestrel::cli

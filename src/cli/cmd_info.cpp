// kestrel info MODEL.gguf: metadata and a tensor table.
#include <fmt/format.h>

#include "cli/commands.h"
#include "model/gguf.h"

namespace kestrel::cli {

void register_info(CLI::App& app) {
  static std::string path;
  static size_t max_items = 8;
  auto* cmd = add_command(app, "info", "Print a GGUF file's metadata and tensor table", [] {
    const GgufFile f = GgufFile::open(path);
    fmt::print("file: {}\nGGUF version {}, {} metadata keys, {} tensors, alignment {}, {} bytes\n\n", f.path(),
               f.version(), f.metadata().size(), f.tensors().size(), f.alignment(), f.file_size());
    fmt::print("metadata:\n");
    for (const auto& [k, v] : f.metadata()) fmt::print("  {:<44} {:<4} {}\n", k, gguf_value_type_name(v.type), v.to_display(max_items));
    fmt::print("\ntensors:\n  {:<36} {:<6} {:>20} {:>14}\n", "name", "type", "shape", "bytes");
    size_t total = 0;
    for (const auto& t : f.tensors()) {
      fmt::print("  {:<36} {:<6} {:>20} {:>14}\n", t.name, type_name(t.type), t.shape_string(), t.nbytes);
      total += t.nbytes;
    }
    fmt::print("  {:<36} {:<6} {:>20} {:>14}\n", "total", "", "", total);
    return 0;
  });
  cmd->add_option("model", path, "GGUF file")->required();
  cmd->add_option("--max-items", max_items, "Array items to show per metadata value")->capture_default_str();
}

}  // namespace kestrel::cli

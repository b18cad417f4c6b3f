// kestrel info MODEL.gguf [--kv-memory 1G]: metadata, a tensor table, and
// what each KV-cache type costs per token and how much context fits; with --device vulkan, where the model's
// layers would run (--gpu-layers, --cpu-moe) and the weight bytes the device holds.
#include <fmt/format.h>

#include "cli/commands.h"
#include "mmproj/mmproj.h"
#include "gguf/gguf.h"
#include "runtime/loaded_model.h"

namespace kestrel::cli {

void register_info(CLI::App& app) {
  static std::string path;
  static size_t max_items = 8;
  static std::string kv_memory;
  static LoadOptions placement;
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
    if (const GgufValue* arch = f.find("general.architecture"); arch && arch->type == GgufValueType::STRING &&
                                                                   arch->as_string() == "clip") {
      fmt::print("\n{}", describe_mmproj(path));  // a multimodal projector: its encoders
      return 0;
    }
    if (placement.device != "cpu") {
      // Where each part would run: the model loaded onto the device (its weights uploaded), as run would.
      LoadOptions o = placement;
      o.model_path = path;
      o.use_mmap = true;
      o.n_ctx = 16;
      o.n_threads = 1;
      const LoadedModel e = LoadedModel::load(o);
      if (const DeviceCounters* d = device_counters(*e.backend))
        fmt::print("\ndevice: {}\n  {}\n  weights on the device: {:.1f} MiB of {:.1f} MiB\n", d->device, d->placement(),
                   static_cast<double>(d->weight_bytes) / (1 << 20), static_cast<double>(total) / (1 << 20));
    }
    if (!kv_memory.empty()) {
      const int64_t budget = parse_size(kv_memory, "--kv-memory");
      LoadOptions o;  // the model's KV layout: mapped, not repacked, a tiny cache
      o.model_path = path;
      o.use_mmap = true;
      o.repack_weights = false;
      o.n_ctx = 16;
      o.n_threads = 1;
      const LoadedModel e = LoadedModel::load(o);
      KvLayout l = e.model->kv_layout();
      fmt::print("\nKV cache ({} {}layers{}, {} + {} values per token per layer), context in {}:\n", l.n_layer,
                 l.n_recurrent > 0 ? "attention " : "",
                 l.n_sliding() ? fmt::format(", {} of them over the last {} positions", l.n_sliding(), l.sliding_window) : "",
                 l.k_width, l.v_width, kv_memory);
      if (l.n_recurrent > 0)
        fmt::print("recurrent state ({} linear-attention layers of {} float32 each, whatever the KV type): {:.2f} MiB "
                   "per sequence with its checkpoint and a prefix snapshot, taken from the memory first\n",
                   l.n_recurrent, l.state_floats, static_cast<double>(l.state_bytes_per_seq()) / (1 << 20));
      for (const KvType t : {KvType::F32, KvType::F16, KvType::BF16, KvType::Q8_0, KvType::FP8, KvType::Q4}) {
        l.k_type = t;
        l.v_type = l.v_f32_only ? KvType::F32 : t;
        const int64_t fit = budget > l.state_bytes_per_seq() ? l.tokens_in(budget - l.state_bytes_per_seq()) : 0;
        fmt::print("  {:<5} {:>5.2f} bits/value {:>10.1f} KiB/token {:>12} tokens\n", kv_type_name(t),
                   l.k_format().bits_per_value(), static_cast<double>(l.bytes_per_token()) / 1024,
                   fit < 0 ? std::string("any number of") : std::to_string(fit));
      }
    }
    return 0;
  });
  cmd->add_option("model", path, "GGUF file")->required();
  cmd->add_option("--kv-memory", kv_memory, "Also list each KV-cache type's bytes per token and the tokens that fit in this much memory (e.g. 1G)");
  cmd->add_option("--max-items", max_items, "Array items to show per metadata value")->capture_default_str();
  add_device_option(cmd, placement);
}

}  // namespace kestrel::cli

#pragma once
// Each subcommand registers its flags and an action; main() runs the one chosen.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <functional>
#include <map>
#include <string>

#include "core/error.h"
#include "kernels/kv_format.h"
#include "backend/vulkan/vulkan_backend.h"
#include "model/model.h"
#include "runtime/loaded_model.h"
#include "runtime/sampler.h"

namespace kestrel::cli {

using Action = std::function<int()>;

// `kestrel --version`, the image's tag (scripts/container.sh) and the traces' service.version.
inline constexpr const char* kVersion = "0.1.0";

// Adds a subcommand whose action runs when it is selected.
CLI::App* add_command(CLI::App& app, const std::string& name, const std::string& help, Action action);

void register_info(CLI::App& app);
void register_tokenize(CLI::App& app);
void register_template(CLI::App& app);
void register_convert(CLI::App& app);
void register_synth(CLI::App& app);
void register_run(CLI::App& app);
void register_chat(CLI::App& app);
void register_hw(CLI::App& app);
void register_bench(CLI::App& app);
void register_profile_report(CLI::App& app);
void register_tune(CLI::App& app);
void register_serve(CLI::App& app);
void register_loadtest(CLI::App& app);
void register_perplexity(CLI::App& app);
void register_precision_check(CLI::App& app);
void register_quantize(CLI::App& app);
void register_imatrix(CLI::App& app);
void register_allreduce_bench(CLI::App& app);
void register_probe(CLI::App& app);

inline void register_all(CLI::App& app) {
  register_run(app);
  register_chat(app);
  register_serve(app);
  register_loadtest(app);
  register_probe(app);
  register_perplexity(app);
  register_precision_check(app);
  register_quantize(app);
  register_imatrix(app);
  register_info(app);
  register_tokenize(app);
  register_template(app);
  register_convert(app);
  register_synth(app);
  register_hw(app);
  register_bench(app);
  register_allreduce_bench(app);
  register_profile_report(app);
  register_tune(app);
}

int run_selected(CLI::App& app);

// The sampler's flags (run, chat).
inline void add_sampling_options(CLI::App* cmd, SamplingParams& s) {
  cmd->add_option("--temp", s.temperature, "Temperature (0: greedy)")->capture_default_str();
  cmd->add_option("--top-k", s.top_k, "Top-k (0: off)")->capture_default_str();
  cmd->add_option("--top-p", s.top_p, "Top-p (1: off)")->capture_default_str();
  cmd->add_option("--min-p", s.min_p, "Min-p (0: off)")->capture_default_str();
  cmd->add_option("--repeat-penalty", s.repeat_penalty, "Repetition penalty (1: off)")->capture_default_str();
  cmd->add_option("--repeat-last-n", s.repeat_last_n, "Tokens the penalties look back over")->capture_default_str();
  cmd->add_option("--frequency-penalty", s.frequency_penalty, "Frequency penalty")->capture_default_str();
  cmd->add_option("--presence-penalty", s.presence_penalty, "Presence penalty")->capture_default_str();
}


// --mla auto|absorbed|decompressed on the commands that load a model.
inline CLI::Option* add_mla_option(CLI::App* cmd, MlaAttention& target) {
  static const std::map<std::string, MlaAttention> modes = {
      {"auto", MlaAttention::Auto}, {"absorbed", MlaAttention::Absorbed}, {"decompressed", MlaAttention::Decompressed}};
  return cmd
      ->add_option("--mla", target,
                   "DeepSeek MLA attention: auto (cheaper per step), absorbed (over the latent cache), decompressed "
                   "(per-head keys and values rebuilt)")
      ->transform(CLI::CheckedTransformer(modes, CLI::ignore_case))
      ->default_str("auto");
}

// "300M", "1.5G", "4096" (bytes): binary multiples; flag names the option in errors.
inline int64_t parse_size(const std::string& s, const char* flag) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = s.substr(used);
  const double mult = unit.empty()  ? 1
                      : unit == "K" ? 1024.0
                      : unit == "M" ? 1048576.0
                      : unit == "G" ? 1073741824.0
                                    : -1;
  if (used == 0 || mult < 0 || v <= 0)
    throw CLI::ValidationError(fmt::format("{} '{}' is not a size (e.g. 300M, 1.5G)", flag, s));
  return static_cast<int64_t>(v * mult);
}

// --device cpu|vulkan[:N], with --gpu-layers, --cpu-moe and --gpu-memory, on the commands that compute (run,
// serve, bench, perplexity, chat): a bad --device value is a usage error before the model loads.
inline void add_device_option(CLI::App* cmd, kestrel::LoadOptions& o) {
  std::string& device = o.device;
  cmd->add_option("--device", device,
                  "Where the model runs: cpu, or vulkan[:N] (the GPU backend on Vulkan device N of `kestrel hw`; "
                  "docs/gpu.md)")
      ->check([](const std::string& v) {
        try {
          kestrel::parse_device(v);
        } catch (const kestrel::Error& e) {
          return std::string(e.what());
        }
        return std::string();
      })
      ->capture_default_str();
  cmd->add_option("--gpu-layers", o.gpu_layers,
                  "With --device vulkan: run layers 0 to N-1 on the device and the rest (with the embedding and "
                  "output head) on the CPU; default: all on the device")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--cpu-moe", o.cpu_moe,
                "With --device vulkan: keep the routed experts' weights in host memory and run them on the CPU");
  cmd->add_option_function<std::string>(
      "--gpu-memory", [&o](const std::string& s) { o.gpu_memory = parse_size(s, "--gpu-memory"); },
      "With --device vulkan: the most device memory the backend may take for weights, KV cache, activations "
      "and staging (e.g. 6G); a load that needs more names the weight or KV pool that did not fit, a request "
      "that needs more fails alone");
}

// A file flag and its scaled twin, llama.cpp's (--lora / --lora-scaled, --control-vector /
// --control-vector-scaled): FILE[,FILE...] at scale 1 and FILE:SCALE[,...], repeatable, each file handed to `take`
// in the order of the flags' definitions (the plain files, then the scaled ones).
inline void add_file_scale_options(CLI::App* cmd, const std::string& flag, const std::string& what,
                                   std::function<void(const std::string&, float)> take) {
  cmd->add_option_function<std::vector<std::string>>(
         flag,
         [take](const std::vector<std::string>& files) {
           for (const std::string& f : files) take(f, 1.0f);
         },
         what + " at scale 1; repeat or separate by commas for several")
      ->delimiter(',');
  const std::string scaled = flag + "-scaled";
  cmd->add_option_function<std::vector<std::string>>(
         scaled,
         [take, scaled](const std::vector<std::string>& args) {
           for (const std::string& a : args) {
             auto [file, scale] = kestrel::parse_file_scale(a, scaled.c_str());
             take(file, scale);
           }
         },
         what + " at a scale: FILE:SCALE; repeat or separate by commas for several")
      ->delimiter(',');
}

// --lora FILE[,FILE...] and --lora-scaled FILE:SCALE[,...], adapter ids in that order: the --lora files, then the
// --lora-scaled ones. serve adds --lora-init-without-apply and --lora-modules.
inline void add_lora_options(CLI::App* cmd, kestrel::LoadOptions& o) {
  add_file_scale_options(cmd, "--lora", "LoRA adapter (llama.cpp's GGUF adapter)",
                         [&o](const std::string& f, float s) { o.loras.push_back({f, s, ""}); });
}

// --control-vector FILE[,...], --control-vector-scaled FILE:SCALE[,...] (summed) and --control-vector-layer-range
// START END (llama.cpp's).
inline void add_control_vector_options(CLI::App* cmd, kestrel::LoadOptions& o) {
  add_file_scale_options(cmd, "--control-vector", "Control vector (llama.cpp's direction.L GGUF; several are summed)",
                         [&o](const std::string& f, float s) { o.control_vectors.push_back({f, s}); });
  cmd->add_option_function<std::vector<int>>(
         "--control-vector-layer-range",
         [&o](const std::vector<int>& r) {
           o.cvec_layer_start = r[0];
           o.cvec_layer_end = r[1];
         },
         "START END: the layers the control vectors apply to (inclusive; default 1 to the last)")
      ->expected(2);
}

// The device placement add_device_option read, copied into the options a command loads with.
inline void set_placement(kestrel::LoadOptions& o, const kestrel::LoadOptions& from) {
  o.device = from.device;
  o.gpu_layers = from.gpu_layers;
  o.cpu_moe = from.cpu_moe;
  o.gpu_memory = from.gpu_memory;
}

// --spec draft needs --draft-model FILE; --spec mtp may name the file its MTP block ships in (DeepSeek-V4's
// mtp-*.gguf); other modes take none (run, serve, bench).
inline void check_draft_model_flags(const std::string& spec, const std::string& draft_model) {
  if (spec == "draft" ? draft_model.empty() : (spec != "mtp" && !draft_model.empty()))
    throw kestrel::Error("--spec draft and --draft-model FILE go together (or --spec mtp with the MTP block's file)");
}
// The MTP block's own file, when --spec mtp names one.
inline std::string mtp_model_of(const std::string& spec, const std::string& draft_model) {
  return spec == "mtp" ? draft_model : std::string();
}

// --kv-type T (keys and values), --kv-type-k T, --kv-type-v T (one of them;
// applied after --kv-type: CLI11 runs option callbacks in definition order).
inline void add_kv_type_options(CLI::App* cmd, KvType& k, KvType& v) {
  auto parse = [](const std::string& s) {
    const auto t = kv_type_from_name(s);
    if (!t) throw CLI::ValidationError(fmt::format("KV type '{}' is not one of {}", s, kKvTypeNames));
    return *t;
  };
  cmd->add_option_function<std::string>("--kv-type", [&k, &v, parse](const std::string& s) { k = v = parse(s); },
                                        std::string("KV cache storage for keys and values: ") + kKvTypeNames +
                                            " (q4: 4-bit with a scale and minimum per 32 channels)")
      ->default_str("f32");
  cmd->add_option_function<std::string>("--kv-type-k", [&k, parse](const std::string& s) { k = parse(s); },
                                        "KV cache storage for keys only (overrides --kv-type)");
  cmd->add_option_function<std::string>("--kv-type-v", [&v, parse](const std::string& s) { v = parse(s); },
                                        "KV cache storage for values only (overrides --kv-type)");
}

}  // namespace kestrel::cli

// kestrel hw [--json] [--measure]: what the engine detected and will use.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "backend/operator.h"
#include "cli/commands.h"
#include "hw/cpu_features.h"
#include "hw/limits.h"
#include "hw/topology.h"
#include "hw/tuning.h"
#include "hw/vulkan_devices.h"
#include "kernels/dot.h"
#include "kernels/matmul.h"
#include "runtime/loaded_model.h"

namespace kestrel::cli {
namespace {

std::string human_bytes(int64_t b) {
  if (b >= (int64_t{1} << 30)) return fmt::format("{:.1f} GiB", static_cast<double>(b) / (1 << 30));
  if (b >= (1 << 20)) return fmt::format("{} MiB", b >> 20);
  if (b >= (1 << 10)) return fmt::format("{} KiB", b >> 10);
  return fmt::format("{} B", b);
}

}  // namespace

void register_hw(CLI::App& app) {
  static bool json = false, measure = false;
  static int threads = 0;
  auto* cmd = add_command(app, "hw", "Print the detected CPU, caches, ISA, selected kernels and measured limits", [] {
    const auto& f = cpu_features();
    const auto& t = topology();
    const IsaLevel isa = selected_isa();
    const MatmulKernels& k = matmul_kernels();  // the table that runs, as matmul uses it
    const int n_threads = threads > 0 ? threads : default_thread_count();
    const VulkanProbe vk = probe_vulkan_devices();
    std::optional<MeasuredLimits> limits = measure ? std::optional(measure_limits(n_threads)) : load_cached_limits(n_threads);
    if (measure) store_limits(*limits);

    const std::vector<std::pair<const char*, bool>> isa_flags = {
        {"sse4.2", f.sse42}, {"avx", f.avx}, {"avx2", f.avx2}, {"fma", f.fma}, {"f16c", f.f16c},
        {"avx512f", f.avx512f}, {"avx512bw", f.avx512bw}, {"avx512vl", f.avx512vl}, {"avx512dq", f.avx512dq},
        {"avx512vnni", f.avx512vnni}, {"avx512bf16", f.avx512bf16}, {"avx512fp16", f.avx512fp16},
        {"avxvnni", f.avxvnni}, {"amx_tile", f.amx_tile}, {"amx_int8", f.amx_int8}, {"amx_bf16", f.amx_bf16}};
    const AmxState& amx = amx_state();
    // Which kernels the tile unit gets: the packed int8 GEMM for batches from the crossover on (AMX-INT8);
    // F16/BF16 weights, MoE experts and attention stay on AVX-512 (no tile kernels for them yet).
    std::string amx_line = amx.detail;
    if (amx.usable) {
      amx_line += packed_tile_gemm(isa)
                      ? fmt::format("; tdpbsud GEMM for the repacked types' batches of {}+ tokens (tile_min_tokens)",
                                    tuning().tile_min_tokens)
                      : fmt::format("; not used at KESTREL_ISA={} (or a build without the AMX kernels)", isa_name(isa));
    }
    const GgmlType formats[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,   GgmlType::Q4_0,
                                GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q4_K,   GgmlType::Q5_K,
                                GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4};
    if (json) {
      nlohmann::json j;
      j["cpu"] = f.brand;
      for (const auto& [name, on] : isa_flags) j["isa"][name] = on;
      j["amx"] = {{"present", amx.present}, {"usable", amx.usable}, {"detail", amx_line}};
      j["packages"] = t.packages;
      j["cores"] = t.cores;
      j["threads"] = t.threads;
      j["numa_nodes"] = t.numa_nodes;
      j["memory_bytes"] = t.memory_bytes;
      for (const auto& c : t.caches)
        j["caches"].push_back({{"level", c.level}, {"kind", c.kind}, {"size_bytes", c.size_bytes},
                               {"instances", c.instances}, {"line_bytes", c.line_bytes}});
      j["kernel_isa"] = isa_name(isa);
      for (GgmlType ty : formats) j["kernels"][std::string(type_name(ty))] = k.name(ty, true);
      j["limits"] = limits ? nlohmann::json::parse(limits_to_json(*limits)) : nlohmann::json(nullptr);
      j["limits_cache"] = limits_cache_path();
      j["tuning"] = {{"q8_token_chunk", tuning().q8_token_chunk}, {"float_token_chunk", tuning().float_token_chunk},
                     {"tile_min_tokens", tuning().tile_min_tokens}, {"source", tuning().source}};
      j["vulkan"]["devices"] = nlohmann::json::array();
      for (const VulkanDevice& d : vk.devices)
        j["vulkan"]["devices"].push_back({{"name", d.name},
                                          {"type", d.type},
                                          {"api_version", d.api_version},
                                          {"driver", d.driver},
                                          {"device_local_bytes", d.device_local_bytes},
                                          {"subgroup_size", d.subgroup_size},
                                          {"max_shared_memory", d.max_shared_memory},
                                          {"max_storage_buffer", d.max_storage_buffer},
                                          {"cooperative_matrix", d.cooperative_matrix},
                                          {"cooperative_matrix_nv", d.cooperative_matrix_nv},
                                          {"storage_16bit", d.storage_16bit},
                                          {"storage_8bit", d.storage_8bit},
                                          {"float16", d.float16},
                                          {"int8", d.int8},
                                          {"integer_dot", d.integer_dot}});
      j["vulkan"]["unavailable"] = vk.unavailable;
      j["operators"] = nlohmann::json::array();
      for (const Operator* op : operators()) {
        nlohmann::json kernels = {"host"};
        for (const char* kind : op->device_kinds()) kernels.push_back(kind);
        j["operators"].push_back({{"name", op->name()}, {"kernels", kernels}});
      }
      fmt::print("{}\n", j.dump(2));
      return 0;
    }
    fmt::print("cpu:        {}\n", f.brand.empty() ? "unknown" : f.brand);
    std::string flags;
    for (const auto& [name, on] : isa_flags)
      if (on) flags += std::string(flags.empty() ? "" : " ") + name;
    fmt::print("isa:        {}\n", flags.empty() ? "(none beyond the baseline)" : flags);
    fmt::print("amx:        {}\n", amx_line);
    fmt::print("topology:   {} package(s), {} core(s), {} thread(s), {} NUMA node(s), {} memory\n", t.packages,
               t.cores, t.threads, t.numa_nodes, human_bytes(t.memory_bytes));
    for (const auto& c : t.caches)
      fmt::print("cache:      L{} {:<11} {:>8} x {} ({}-byte lines)\n", c.level, c.kind, human_bytes(c.size_bytes),
                 c.instances, c.line_bytes);
    fmt::print("kernels:    {} (KESTREL_ISA=scalar|avx2|avx512|amx to force)\n", isa_name(isa));
    for (GgmlType ty : formats) fmt::print("  {:<6} {}\n", type_name(ty), k.name(ty, true));
    fmt::print("tiles:      q8 token chunk {}, float token chunk {}, tile crossover {} tokens ({}; `kestrel tune` to "
               "measure)\n",
               tuning().q8_token_chunk, tuning().float_token_chunk, tuning().tile_min_tokens, tuning().source);
    // The named operators beyond the backends' core (backend/operator.h): host: the CPU's kernel, which every
    // backend without one of its own runs; vulkan: a device kernel.
    fmt::print("operators:  {}\n", operator_list());
    if (vk.devices.empty()) fmt::print("vulkan:     {}\n", vk.unavailable);
    for (size_t i = 0; i < vk.devices.size(); i++) {
      const VulkanDevice& d = vk.devices[i];
      std::string has;
      for (const auto& [name, on] :
           std::initializer_list<std::pair<const char*, bool>>{{"coopmat", d.cooperative_matrix},
                                                               {"coopmat-nv", d.cooperative_matrix_nv},
                                                               {"storage16", d.storage_16bit},
                                                               {"storage8", d.storage_8bit},
                                                               {"fp16", d.float16},
                                                               {"int8", d.int8},
                                                               {"int-dot", d.integer_dot}})
        has += fmt::format(" {}{}", on ? "+" : "-", name);
      fmt::print(
          "vulkan:     [{}] {} ({}, Vulkan {}, {}): {} device-local, subgroup {}, shared {}, binding up to {};{}\n", i,
          d.name, d.type, d.api_version, d.driver, human_bytes(d.device_local_bytes), d.subgroup_size,
          human_bytes(d.max_shared_memory), human_bytes(static_cast<int64_t>(d.max_storage_buffer)), has);
    }
    if (limits) {
      fmt::print("limits:     measured {} with {} thread(s){}\n", limits->measured_at, limits->threads,
                 measure ? "" : " (cached; --measure to measure again)");
      fmt::print("  read bandwidth  {:8.1f} GB/s\n", limits->read_bandwidth_gbs);
      fmt::print("  f32 FMA peak    {:8.1f} GFLOP/s  ({})\n", limits->f32_fma_gflops, limits->f32_isa);
      fmt::print("  int8 dot peak   {:8.1f} GOP/s    ({})\n", limits->int8_dot_gops, limits->int8_isa);
      if (limits->bf16_dot_gflops > 0)
        fmt::print("  bf16 dot peak   {:8.1f} GFLOP/s  ({})\n", limits->bf16_dot_gflops, limits->bf16_isa);
      if (limits->amx_int8_gops > 0) {
        fmt::print("  amx int8 peak   {:8.1f} GOP/s    (tdpbssd)\n", limits->amx_int8_gops);
        fmt::print("  amx bf16 peak   {:8.1f} GFLOP/s  (tdpbf16ps)\n", limits->amx_bf16_gflops);
      } else {
        fmt::print("  amx peaks       unmeasured ({})\n", amx_state().usable ? "a build without the AMX kernels" : amx_state().detail);
      }
      fmt::print("  cached in       {}\n", limits_cache_path());
    } else {
      fmt::print("limits:     not measured yet for {} thread(s): run `kestrel hw --measure`\n", n_threads);
    }
    return 0;
  });
  cmd->add_flag("--json", json, "Machine-readable output");
  cmd->add_flag("--measure", measure, "Measure read bandwidth and peak throughput now (and cache them)");
  cmd->add_option("-t,--threads", threads, "Threads for the measurements (0: all cores)");
}

}  // namespace kestrel::cli

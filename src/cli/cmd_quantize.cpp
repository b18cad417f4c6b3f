// kestrel quantize IN.gguf OUT.gguf --type q4_k [--method rtn|awq|gptq|awq+gptq --calib TEXT]
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "core/block_formats.h"
#include "core/error.h"
#include "model/requantize.h"
#include "runtime/calibration.h"
#include "runtime/engine.h"

namespace kestrel::cli {
namespace {

struct QuantizeFlags {
  std::string in_path, out_path, type_str = "q8_0", method_str = "rtn", calib_path;
  int threads = 0;
  int64_t calib_ctx = 128, calib_chunks = 0;
  double gptq_damp = 0.01;
};

std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(fmt::format("cannot read calibration text '{}'", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

int quantize(const QuantizeFlags& f) {
  const auto type = type_from_name(f.type_str);
  if (!type || !can_quantize_to(*type))
    throw Error(fmt::format("--type '{}' is not one of {}", f.type_str, kWritableTypes));
  static const std::map<std::string, QuantMethod> methods = {{"rtn", QuantMethod::Rtn},
                                                             {"awq", QuantMethod::Awq},
                                                             {"gptq", QuantMethod::Gptq},
                                                             {"awq+gptq", QuantMethod::AwqGptq}};
  const auto method = methods.find(f.method_str);
  if (method == methods.end())
    throw Error(fmt::format("--method '{}' is not one of rtn, awq, gptq, awq+gptq", f.method_str));
  if (method->second != QuantMethod::Rtn && f.calib_path.empty())
    throw Error(fmt::format("--method {} needs --calib FILE (calibration text)", f.method_str));
  if (f.gptq_damp <= 0 || f.gptq_damp > 10)
    throw Error(fmt::format("--gptq-damp {} is out of range (0, 10]", f.gptq_damp));
  if (std::filesystem::exists(f.out_path) && std::filesystem::equivalent(f.in_path, f.out_path))
    throw Error("the output would overwrite the input");
  const GgufFile in = GgufFile::open(f.in_path);
  RequantizeOptions o;
  o.type = *type;
  o.method = method->second;
  o.gptq_damp = f.gptq_damp;
  o.n_threads = f.threads > 0 ? f.threads : default_thread_count();
  o.on_fallback = [](const std::string& tensor, GgmlType used) {
    fmt::print(stderr, "quantize: {} rows do not divide into the type's blocks; stored as {}\n", tensor,
               type_name(used));
  };
  o.on_report = [](const std::string& line) { fmt::print(stderr, "quantize: {}\n", line); };
  if (!f.calib_path.empty()) {
    CalibrationOptions co;
    co.n_ctx = f.calib_ctx;
    co.max_chunks = f.calib_chunks;
    co.hessian = method->second == QuantMethod::Gptq || method->second == QuantMethod::AwqGptq;
    co.n_threads = o.n_threads;
    auto stats =
        std::make_shared<CalibrationStats>(collect_activation_stats(f.in_path, read_text_file(f.calib_path), co));
    fmt::print(stderr, "quantize: calibration over {} tokens of {}, {} input sites\n", stats->n_tokens, f.calib_path,
               stats->sites.size());
    o.calib = std::move(stats);
  }
  requantize(in, o).write_file(f.out_path);
  fmt::print("wrote {} ({}, {}, {:.1f} MiB from {:.1f} MiB)\n", f.out_path, type_name(*type), f.method_str,
             static_cast<double>(std::filesystem::file_size(f.out_path)) / (1 << 20),
             static_cast<double>(std::filesystem::file_size(f.in_path)) / (1 << 20));
  return 0;
}

}  // namespace

void register_quantize(CLI::App& app) {
  static QuantizeFlags f;
  auto* cmd =
      add_command(app, "quantize", "Rewrite a GGUF model's matrices in another type", [] { return quantize(f); });
  cmd->add_option("input", f.in_path, "GGUF model to read")->required();
  cmd->add_option("output", f.out_path, "GGUF file to write")->required();
  cmd->add_option("--type", f.type_str, kWritableTypes)->capture_default_str();
  cmd->add_option("--method", f.method_str,
                  "rtn (round to nearest), awq (activation-aware scaling), gptq (error-compensating rounding), "
                  "awq+gptq")
      ->capture_default_str();
  cmd->add_option("--calib", f.calib_path,
                  "Calibration text for awq/gptq (plain text, e.g. tests/data/calib-stories.txt)");
  cmd->add_option("--calib-ctx", f.calib_ctx, "Calibration chunk length in tokens")->capture_default_str();
  cmd->add_option("--calib-chunks", f.calib_chunks, "Calibration chunks to use (0: the whole text)")
      ->capture_default_str();
  cmd->add_option("--gptq-damp", f.gptq_damp, "GPTQ damping: added to the Hessian's diagonal, times its mean")
      ->capture_default_str();
  cmd->add_option("-t,--threads", f.threads, "Threads (0: all cores)");
}

}  // namespace kestrel::cli

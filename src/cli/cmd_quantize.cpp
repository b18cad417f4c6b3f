// kestrel quantize IN.gguf OUT.gguf --type q4_k | --mix Q4_K_M [--method rtn|awq|gptq|awq+gptq --calib TEXT]
#include <fmt/format.h>

#include <filesystem>
#include <algorithm>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "core/read_file.h"
#include "cli/progress_bar.h"
#include "formats/block_formats.h"
#include "core/error.h"
#include "quant/imatrix.h"
#include "quant/quant_mix.h"
#include "quant/requantize.h"
#include "quant/calibration.h"
#include "runtime/loaded_model.h"
#include "quant/mixed_precision.h"

namespace kestrel::cli {
namespace {

struct QuantizeFlags {
  std::string in_path, out_path, type_str = "q8_0", mix_str, method_str = "rtn", calib_path;
  std::string output_type_str, token_embd_type_str, imatrix_path;
  int threads = 0;
  int64_t calib_ctx = 128, calib_chunks = 0;
  double gptq_damp = 0.01;
  double target_kld = -1;
  std::string target_size, types = "q4_0,q4_k,q5_k,q6_k,q8_0";
};

std::vector<GgmlType> parse_types(const std::string& list) {
  std::vector<GgmlType> out;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) {
    const auto t = type_from_name(item);
    if (!t || !can_quantize_to(*t)) throw Error(fmt::format("--types: '{}' is not one of {}", item, kWritableTypes));
    out.push_back(*t);
  }
  std::sort(out.begin(), out.end(), [](GgmlType a, GgmlType b) {
    return static_cast<double>(traits(a).type_size) / traits(a).block_size <
           static_cast<double>(traits(b).type_size) / traits(b).block_size;
  });
  return out;
}

std::optional<GgmlType> writable_type(const std::string& name, const char* flag) {
  if (name.empty()) return std::nullopt;
  const auto t = type_from_name(name);
  if (!t || !can_quantize_to(*t)) throw Error(fmt::format("{} '{}' is not one of {}", flag, name, kWritableTypes));
  return t;
}

int quantize(QuantizeFlags f) {
  // A mix name that is not also a type name (q4_k_m, q3_k_s, ...) given to --type means --mix.
  if (f.mix_str.empty() && !type_from_name(f.type_str) && find_quant_mix(f.type_str)) std::swap(f.mix_str, f.type_str);
  std::optional<QuantMix> mix;
  if (!f.mix_str.empty()) {
    mix = find_quant_mix(f.mix_str);
    if (!mix) throw Error(fmt::format("--mix '{}' is not one of {}", f.mix_str, quant_mix_names()));
    if (!can_quantize_to(mix->base))
      throw Error(fmt::format("--mix {}: its base type {} cannot be written yet (Kestrel writes {})", mix->name,
                              type_name(mix->base), kWritableTypes));
    f.type_str = std::string(type_name(mix->base));
  }
  const auto type = type_from_name(f.type_str);
  if (!type || !can_quantize_to(*type))
    throw Error(fmt::format("--type '{}' is not one of {} (or a mix: {})", f.type_str, kWritableTypes, quant_mix_names()));
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
  if (method->second != QuantMethod::Rtn) {
    CalibrationOptions co;
    co.n_ctx = f.calib_ctx;
    co.max_chunks = f.calib_chunks;
    co.hessian = method->second == QuantMethod::Gptq || method->second == QuantMethod::AwqGptq;
    co.n_threads = o.n_threads;
    auto stats =
        std::make_shared<CalibrationStats>(collect_activation_stats(f.in_path, read_whole_file(f.calib_path, "calibration text"), co));
    fmt::print(stderr, "quantize: calibration over {} tokens of {}, {} input sites\n", stats->n_tokens, f.calib_path,
               stats->sites.size());
    o.calib = std::move(stats);
  }
  const bool mixed = f.target_kld >= 0 || !f.target_size.empty();
  if (mixed && mix) throw Error("--mix and --target-kld / --target-size each choose per-tensor types: give one");
  if (!f.imatrix_path.empty()) {
    if (method->second == QuantMethod::Gptq || method->second == QuantMethod::AwqGptq)
      throw Error("--imatrix weighs rounding by activations; GPTQ does so with its Hessian: give one of them");
    o.imatrix = std::make_shared<ImportanceMatrix>(read_imatrix(f.imatrix_path));
    fmt::print(stderr, "quantize: importance matrix {}: {} matrices from {} chunks\n", f.imatrix_path,
               o.imatrix->entries.size(), o.imatrix->chunk_count);
  }
  QuantMixOptions mix_options;
  mix_options.has_imatrix = o.imatrix != nullptr;
  mix_options.output_type = writable_type(f.output_type_str, "--output-tensor-type");
  mix_options.token_embedding_type = writable_type(f.token_embd_type_str, "--token-embedding-type");
  if (!mix && (mix_options.output_type || mix_options.token_embedding_type))
    throw Error("--output-tensor-type / --token-embedding-type apply to a --mix");
  if (mix) {
    o.tensor_types = plan_quant_mix(in, *mix, mix_options);
    o.file_type = mix->ftype;
    std::map<std::string, int> counts;
    for (const auto& [name, t] : o.tensor_types) counts[std::string(type_name(t))]++;
    std::string summary;
    for (const auto& [t, c] : counts) summary += fmt::format("{}{} {}", summary.empty() ? "" : ", ", t, c);
    fmt::print(stderr, "quantize: mix {}: {}\n", mix->name, summary);
  }
  if (mixed) {
    if (f.calib_path.empty()) throw Error("--target-kld / --target-size need --calib FILE to measure sensitivities");
    if (f.target_kld >= 0 && !f.target_size.empty()) throw Error("give --target-kld or --target-size, not both");
    MixedPrecisionOptions mo;
    mo.ladder = parse_types(f.types);
    mo.target_kld = f.target_kld;
    if (!f.target_size.empty()) {
      // The file is its tensors plus metadata (vocabulary, ...) and padding, which stay as they are.
      int64_t tensors = 0;
      for (const auto& t : in.tensors()) tensors += static_cast<int64_t>(t.nbytes);
      const auto overhead = static_cast<int64_t>(std::filesystem::file_size(f.in_path)) - tensors;
      mo.target_bytes = std::max<int64_t>(0, parse_size(f.target_size, "--target-size") - overhead);
    }
    mo.n_ctx = f.calib_ctx;
    mo.max_chunks = f.calib_chunks > 0 ? f.calib_chunks : 4;
    mo.n_threads = o.n_threads;
    const MixedPrecisionPlan plan = plan_mixed_precision(f.in_path, read_whole_file(f.calib_path, "calibration text"), mo);
    fmt::print("| tensor | type | MiB | KLD alone |\n| --- | --- | ---: | ---: |\n");
    for (const auto& t : plan.tensors)
      fmt::print("| {} | {} | {:.3f} | {:.6f} |\n", t.name, type_name(t.type), static_cast<double>(t.bytes) / (1 << 20),
                 t.kld);
    fmt::print("plan: {:.1f} MiB of tensors, predicted KLD {:.5f} (sum of the KLDs alone){}\n",
               static_cast<double>(plan.tensor_bytes) / (1 << 20), plan.predicted_kld,
               plan.met ? "" : " — the target cannot be met with these types; this is the closest plan");
    o.tensor_types = plan.types;
    o.type = mo.ladder.front();
  }
  ProgressBar bar("quantize", static_cast<int64_t>(in.tensors().size()));
  o.on_progress = [&](int64_t done, int64_t, const std::string& name) { bar.update(done, name); };
  requantize(in, o).write_file(f.out_path);
  fmt::print("wrote {} ({}{}, {}, {:.1f} MiB from {:.1f} MiB)\n", f.out_path,
             mix ? std::string(mix->name) : std::string(type_name(o.type)),
             o.tensor_types.empty() || mix ? "" : " and wider per the plan", f.method_str,
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
  cmd->add_option("--type", f.type_str, std::string("One type for every matrix: ") + kWritableTypes)
      ->capture_default_str();
  cmd->add_option("--mix", f.mix_str,
                  "A llama-quantize mix, with its per-tensor rules: " + quant_mix_names() +
                      " (a mix name that is not a type name may also be given to --type)");
  cmd->add_option("--imatrix", f.imatrix_path,
                  "Importance matrix (kestrel imatrix, or llama-imatrix's GGUF output): fits weigh errors by it");
  cmd->add_option("--output-tensor-type", f.output_type_str, "With --mix: the output head's type");
  cmd->add_option("--token-embedding-type", f.token_embd_type_str, "With --mix: the token embedding's type");
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
  cmd->add_option("--target-kld", f.target_kld,
                  "Mixed precision: per-tensor types from --types for the smallest file whose predicted KL divergence "
                  "(measured per tensor on --calib) is within this");
  cmd->add_option("--target-size", f.target_size,
                  "Mixed precision: the lowest predicted KL divergence within this size of tensors (e.g. 300M)");
  cmd->add_option("--types", f.types, "Mixed precision: candidate types, comma-separated")->capture_default_str();
  cmd->add_option("-t,--threads", f.threads, "Threads (0: all cores)");
}

}  // namespace kestrel::cli

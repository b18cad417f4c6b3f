// Which architectures Kestrel runs, and reading their hyperparameters.
#include <fmt/format.h>

#include "core/error.h"
#include "model/arch/architectures.h"
#include "model/deepseek2_config.h"
#include "model/hparams_reader.h"
#include "model/model.h"

namespace kestrel {
namespace {

struct DecoderArch {
  const char* name;
  ModelConfig (*read)(HparamReader&, const ModelOptions&);
};

// general.architecture -> the file that reads its hyperparameters.
constexpr DecoderArch kDecoderArchs[] = {
    {"llama", read_llama_arch},   {"qwen2", read_qwen2_arch},   {"qwen2moe", read_qwen2moe_arch},
    {"qwen3", read_qwen3_arch},   {"qwen3moe", read_qwen3moe_arch}, {"phi3", read_phi3_arch},
    {"gemma2", read_gemma2_arch}, {"gemma3", read_gemma3_arch},
};

const DecoderArch* find_decoder_arch(const std::string& arch) {
  for (const auto& a : kDecoderArchs)
    if (arch == a.name) return &a;
  return nullptr;
}

std::string architecture_of(const GgufFile& file) {
  const std::string arch = file.get_string("general.architecture").value_or("");
  if (arch.empty()) throw Error(fmt::format("{}: missing metadata key 'general.architecture'", file.path()));
  check_not_split(file);
  if (arch != "deepseek2" && !find_decoder_arch(arch))
    throw Error(fmt::format("{}: architecture '{}' is not supported (supported: {})", file.path(), arch,
                            supported_architectures()));
  return arch;
}

}  // namespace

std::string supported_architectures() {
  std::string names;
  for (const auto& a : kDecoderArchs) names += std::string(a.name) + ", ";
  return names + "deepseek2";
}

ModelConfig read_model_config(const GgufFile& file, const ModelOptions& options) {
  const std::string arch = architecture_of(file);
  if (arch == "deepseek2") return read_deepseek2_config(file);
  HparamReader h(file, arch);
  ModelConfig c = find_decoder_arch(arch)->read(h, options);
  h.finish();
  return c;
}

}  // namespace kestrel

#include <fmt/format.h>

#include "core/error.h"
#include "model/deepseek2_model.h"
#include "model/llama_model.h"
#include "model/model.h"

namespace kestrel {

void Model::forward_mtp(const Batch&, const float*, PagedKvCache&, float*, float*) {
  throw Error(fmt::format("the {} model has no multi-token-prediction layers loaded (DeepSeek-V3 `nextn` blocks)",
                          config().arch));
}

std::unique_ptr<Model> load_model(const GgufFile& file, Backend& backend, const ModelOptions& options) {
  const std::string arch = file.get_string("general.architecture").value_or("");
  if (arch.empty()) throw Error(fmt::format("{}: missing metadata key 'general.architecture'", file.path()));
  if (options.max_batch_tokens <= 0) throw Error("the batch size must be positive");
  if (arch == "llama" || arch == "qwen2") return make_llama_model(file, backend, options);
  if (arch == "deepseek2") return make_deepseek2_model(file, backend, options);
  throw Error(fmt::format("{}: architecture '{}' is not supported (supported: llama, qwen2, deepseek2)", file.path(), arch));
}

}  // namespace kestrel

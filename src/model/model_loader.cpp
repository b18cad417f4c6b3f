// Loading a model: its family from general.architecture (model/family.h),
// the family's hyperparameters, then its layers.
#include <fmt/format.h>

#include "core/error.h"
#include "model/family.h"
#include "model/hparams_reader.h"
#include "model/model.h"

namespace kestrel {

void Model::forward_mtp(const Batch&, const BatchPlacement&, KvStore&, const float*, float*, float*) {
  throw Error(fmt::format("the {} model has no multi-token-prediction layers loaded (DeepSeek `nextn` blocks)",
                          config().arch));
}

void Model::start_forward(const Batch&, const BatchPlacement&, KvStore&, int) {
  throw Error(fmt::format("the {} model keeps one step in flight (forward)", config().arch));
}
void Model::finish_forward(int, float*) { throw Error("finish_forward: no step was started"); }
void Model::set_control_vector(std::shared_ptr<const ControlVector>) {
  throw Error(fmt::format("control vectors are not implemented for {} models", config().arch));
}

namespace {

const Family& family_of_file(const GgufFile& file) {
  const std::string arch = file.get_string("general.architecture").value_or("");
  if (arch.empty()) throw Error(fmt::format("{}: missing metadata key 'general.architecture'", file.path()));
  check_not_split(file);
  const Family* f = find_family(arch);
  if (!f)
    throw Error(fmt::format("{}: architecture '{}' is not supported (supported: {})", file.path(), arch,
                            supported_architectures()));
  return *f;
}

}  // namespace

ModelConfig read_model_config(const GgufFile& file, const ModelOptions& options) {
  const Family& f = family_of_file(file);
  HparamReader h(file, f.name);
  ModelConfig c = f.read(h, options);
  h.finish();
  return c;
}

std::unique_ptr<Model> load_model(const GgufFile& file, Backend& backend, const ModelOptions& options) {
  if (options.max_batch_tokens <= 0) throw Error("the batch size must be positive");
  ModelConfig config = read_model_config(file, options);
  return family_of_file(file).make(file, backend, options, std::move(config));
}

}  // namespace kestrel

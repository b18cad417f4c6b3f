#include <fmt/format.h>

#include "core/error.h"
#include "model/decoder_model.h"
#include "model/deepseek2_model.h"
#include "model/model.h"

namespace kestrel {

void Model::forward_mtp(const Batch&, const float*, PagedKvCache&, float*, float*) {
  throw Error(fmt::format("the {} model has no multi-token-prediction layers loaded (DeepSeek-V3 `nextn` blocks)",
                          config().arch));
}

void Model::forward_placed(const Batch&, const BatchPlacement&, KvStore&, float*, float*) {
  throw Error(fmt::format("the {} model cannot run split across ranks (tensor parallelism)", config().arch));
}

void Model::start_forward(const Batch&, PagedKvCache&, int) {
  throw Error(fmt::format("the {} model keeps one step in flight (forward)", config().arch));
}
void Model::finish_forward(int, float*) { throw Error("finish_forward: no step was started"); }
void Model::start_forward_placed(const Batch&, const BatchPlacement&, KvStore&, int) {
  throw Error(fmt::format("the {} model cannot pipeline steps across pipeline stages", config().arch));
}
void Model::finish_forward_placed(int, float*) { throw Error("finish_forward_placed: no step was started"); }

std::unique_ptr<Model> load_model(const GgufFile& file, Backend& backend, const ModelOptions& options) {
  if (options.max_batch_tokens <= 0) throw Error("the batch size must be positive");
  ModelConfig config = read_model_config(file, options);
  if (config.arch == "deepseek2") return make_deepseek2_model(file, backend, options, std::move(config));
  return make_decoder_model(file, backend, options, std::move(config));
}

}  // namespace kestrel

#include "model/hparams_reader.h"

#include <map>

#include <fmt/format.h>

#include <cmath>

namespace kestrel {

HparamReader::HparamReader(const GgufFile& file, std::string arch) : f_(file), arch_(std::move(arch)) {}

Error HparamReader::bad(const std::string& key, const std::string& why) const {
  return Error(fmt::format("{}: metadata '{}' {}", f_.path(), full(key), why));
}

int64_t HparamReader::need_int(const std::string& key) {
  const auto v = opt_int(key);
  if (!v) throw Error(fmt::format("{}: missing metadata key '{}'", f_.path(), full(key)));
  if (*v <= 0) throw bad(key, fmt::format("= {} must be positive", *v));
  return *v;
}

namespace {
// The largest value a key may take. Buffers are sized from these before any
// tensor is read, so a hostile or broken file must be refused here, with the
// key named, not by a failed allocation; today's largest models are far
// inside (DeepSeek-V3: 7168 wide, 18432 FFN, 61 layers, 128 heads, 163840 context).
int64_t limit_of(const std::string& key) {
  static const std::map<std::string, int64_t> limits = {
      {"embedding_length", int64_t{1} << 17},
      {"feed_forward_length", int64_t{1} << 20},
      {"expert_feed_forward_length", int64_t{1} << 20},
      {"expert_shared_feed_forward_length", int64_t{1} << 20},
      {"block_count", int64_t{1} << 12},
      {"attention.head_count", int64_t{1} << 12},
      {"attention.head_count_kv", int64_t{1} << 12},
      {"attention.key_length", int64_t{1} << 14},
      {"attention.value_length", int64_t{1} << 14},
      {"attention.q_lora_rank", int64_t{1} << 16},
      {"attention.kv_lora_rank", int64_t{1} << 16},
      {"expert_count", int64_t{1} << 12},
      {"expert_used_count", int64_t{1} << 12},
      {"context_length", int64_t{1} << 27},
      {"rope.scaling.original_context_length", int64_t{1} << 27},
      {"attention.sliding_window", int64_t{1} << 27},
  };
  const auto it = limits.find(key);
  return it != limits.end() ? it->second : (int64_t{1} << 31) - 1;  // every other count fits an int
}
}  // namespace

std::optional<int64_t> HparamReader::opt_int(const std::string& key) {
  read_.insert(key);
  const auto v = f_.get_int(full(key));
  if (v && *v < 0) throw bad(key, fmt::format("= {} must not be negative", *v));
  if (v && *v > limit_of(key)) throw bad(key, fmt::format("= {} is beyond any model's (at most {})", *v, limit_of(key)));
  return v;
}

std::optional<double> HparamReader::opt_float(const std::string& key) {
  read_.insert(key);
  const auto v = f_.get_double(full(key));
  if (v && !std::isfinite(*v)) throw bad(key, fmt::format("= {} must be a finite number", *v));
  return v;
}

std::optional<std::string> HparamReader::opt_string(const std::string& key) {
  read_.insert(key);
  return f_.get_string(full(key));
}

std::optional<bool> HparamReader::opt_bool(const std::string& key) {
  read_.insert(key);
  return f_.get_bool(full(key));
}

void HparamReader::finish() const {
  // Keys that describe the file or the training, not the arithmetic.
  static const std::set<std::string> harmless = {
      "context_length",          // the default context; -c overrides it
      "vocab_size",              // the embedding's rows are what counts
      "tensor_data_layout",      // old llama conversions: "Meta AI original pth"
      "rope.scaling.finetuned",  // whether the scaling was trained on
  };
  const std::string prefix = arch_ + ".";
  for (const auto& [key, value] : f_.metadata()) {
    if (key.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string k = key.substr(prefix.size());
    if (read_.count(k) || harmless.count(k)) continue;
    throw Error(fmt::format("{}: metadata key '{}' ({}) is not implemented for the {} architecture; it may change how "
                            "the model computes, so Kestrel refuses to load the file rather than ignore it",
                            f_.path(), key, value.to_display(), arch_));
  }
}

void check_not_split(const GgufFile& f) {
  const auto count = f.get_int("split.count");
  if (count && *count > 1)
    throw Error(fmt::format("{}: part of a GGUF split into {} files; merge them first "
                            "(llama-gguf-split --merge FIRST-PART OUT.gguf)",
                            f.path(), *count));
}

}  // namespace kestrel

#include "model/weight_loader.h"

#include <fmt/format.h>

#include <cstring>

#include "formats/block_formats.h"
#include "core/error.h"

namespace kestrel {

Weight WeightLoader::from_info(const GgufTensorInfo& t, const std::vector<int64_t>& ne) const {
  std::vector<int64_t> have = t.ne;
  while (have.size() > ne.size() && have.back() == 1) have.pop_back();
  if (have != ne)
    throw Error(fmt::format("{}: tensor '{}' has shape {}, expected {}", file_.path(), t.name, t.shape_string(),
                            shape_string(ne)));
  if (!traits(t.type).computable)
    throw Error(fmt::format("{}: tensor '{}' has type {}, which Kestrel cannot compute with yet", file_.path(), t.name,
                            type_name(t.type)));
  used_.insert(t.name);
  return Weight{t.name, t.type, ne, t.data, t.nbytes, nullptr, nullptr};
}

Weight WeightLoader::require(const std::string& name, const std::vector<int64_t>& ne) const {
  const GgufTensorInfo* t = file_.find_tensor(name);
  if (!t) throw Error(fmt::format("{}: missing tensor '{}'", file_.path(), name));
  return from_info(*t, ne);
}

std::vector<int32_t> WeightLoader::require_i32(const std::string& name, const std::vector<int64_t>& ne) const {
  const GgufTensorInfo* t = file_.find_tensor(name);
  if (!t) throw Error(fmt::format("{}: missing tensor '{}'", file_.path(), name));
  if (t->type != GgmlType::I32)
    throw Error(fmt::format("{}: tensor '{}' has type {}, expected I32", file_.path(), name, type_name(t->type)));
  std::vector<int64_t> have = t->ne;
  while (have.size() > ne.size() && have.back() == 1) have.pop_back();
  if (have != ne)
    throw Error(fmt::format("{}: tensor '{}' has shape {}, expected {}", file_.path(), name, t->shape_string(),
                            shape_string(ne)));
  used_.insert(name);
  std::vector<int32_t> out(t->nbytes / sizeof(int32_t));
  std::memcpy(out.data(), t->data, out.size() * sizeof(int32_t));
  return out;
}

Weight WeightLoader::optional(const std::string& name, const std::vector<int64_t>& ne) const {
  const GgufTensorInfo* t = file_.find_tensor(name);
  return t ? from_info(*t, ne) : Weight{};
}

std::vector<float> WeightLoader::require_vector(const std::string& name, int64_t n) const {
  const Weight w = require(name, {n});
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_row(w.type, w.data, out.data(), n);
  return out;
}

std::vector<float> WeightLoader::optional_vector(const std::string& name, int64_t n) const {
  if (!file_.find_tensor(name)) return {};
  return require_vector(name, n);
}

std::vector<float> WeightLoader::optional_floats(const std::string& name, const std::vector<int64_t>& ne) const {
  if (!file_.find_tensor(name)) return {};
  const Weight w = require(name, ne);
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_row(w.type, w.data, out.data(), n);
  return out;
}

}  // namespace kestrel

namespace kestrel {

void WeightLoader::skip(const std::string& name, const char*) const {
  if (file_.find_tensor(name)) used_.insert(name);
}

void WeightLoader::skip_prefix(const std::string& prefix, const char*) const {
  for (const auto& t : file_.tensors())
    if (t.name.compare(0, prefix.size(), prefix) == 0) used_.insert(t.name);
}

void WeightLoader::finish(const std::string& arch) const {
  for (const auto& t : file_.tensors())
    if (!used_.count(t.name))
      throw Error(fmt::format("{}: tensor '{}' is not part of the {} architecture as Kestrel computes it; refusing "
                              "to load a model whose math would be left out",
                              file_.path(), t.name, arch));
}

}  // namespace kestrel

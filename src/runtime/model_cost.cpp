#include "runtime/model_cost.h"

#include <fmt/format.h>

#include <map>

namespace kestrel {

ModelCost model_cost(const GgufFile& f, const ModelConfig& c) {
  ModelCost m;
  m.file_bytes = static_cast<int64_t>(f.file_size());
  std::map<GgmlType, int64_t> bytes_by_type;
  for (const auto& t : f.tensors()) {
    m.n_params += t.n_elements();
    if (t.ne.size() < 2) continue;  // norms and biases: negligible traffic
    // The embedding table is read one row per token, unless it doubles as the output head.
    const bool lookup_only = t.name == "token_embd.weight" && !c.tied_output;
    if (lookup_only) continue;
    m.matmul_params += t.n_elements();
    m.weight_bytes_per_token += static_cast<int64_t>(t.nbytes);
    bytes_by_type[t.type] += static_cast<int64_t>(t.nbytes);
  }
  int64_t best = -1;
  for (const auto& [type, bytes] : bytes_by_type)
    if (bytes > best) best = bytes, m.dominant_type = type;
  return m;
}

double ModelCost::flops_per_token(const ModelConfig& c, int64_t context) const {
  const double attention = 2.0 * 2.0 * c.n_layer * static_cast<double>(context) * c.n_head * c.head_dim;
  return 2.0 * static_cast<double>(matmul_params) + attention;
}

std::string ModelCost::describe(const ModelConfig& c) const {
  const double p = static_cast<double>(n_params);
  const std::string size = p >= 1e9 ? fmt::format("{:.1f}B", p / 1e9) : fmt::format("{:.0f}M", p / 1e6);
  return fmt::format("{} {} {}", c.arch, size, type_name(dominant_type));
}

}  // namespace kestrel

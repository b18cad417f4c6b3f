#include "measure/model_cost.h"

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
    // A token runs only its routed experts: of the 3-D expert tensors, it
    // reads and multiplies n_used of every n_expert slices.
    const MoeRouting& r = c.moe.routing;
    const bool routed = t.name.find("_exps.") != std::string::npos && r.n_expert > 0;
    const double share = routed ? static_cast<double>(r.n_used) / r.n_expert : 1.0;
    m.matmul_params += static_cast<int64_t>(static_cast<double>(t.n_elements()) * share);
    m.weight_bytes_per_token += static_cast<int64_t>(static_cast<double>(t.nbytes) * share);
    bytes_by_type[t.type] += static_cast<int64_t>(t.nbytes);
  }
  int64_t best = -1;
  for (const auto& [type, bytes] : bytes_by_type)
    if (bytes > best) best = bytes, m.dominant_type = type;
  return m;
}

double ModelCost::flops_per_token(const ModelConfig& c, int64_t context) const {
  // Per earlier position and head: a key dot and a value axpy. MLA attends
  // over the latent (absorbed: keys of kv_lora + rope dims, values kv_lora).
  const MlaConfig& m = c.mla;
  const double dims = m.kv_lora_rank > 0 ? 2.0 * m.kv_lora_rank + m.qk_rope : 2.0 * c.head_dim;
  const double attention = 2.0 * c.n_layer * static_cast<double>(context) * c.n_head * dims;
  return 2.0 * static_cast<double>(matmul_params) + attention;
}

std::string ModelCost::describe(const ModelConfig& c) const {
  const double p = static_cast<double>(n_params);
  const std::string size = p >= 1e9 ? fmt::format("{:.1f}B", p / 1e9) : fmt::format("{:.0f}M", p / 1e6);
  if (c.moe.routing.n_expert > 0) {
    const double a = static_cast<double>(matmul_params);
    return fmt::format("{} {} ({:.1f}B active) {}", c.arch, size, a / 1e9, type_name(dominant_type));
  }
  return fmt::format("{} {} {}", c.arch, size, type_name(dominant_type));
}

}  // namespace kestrel

#include "parallel/tensor_shard.h"

#include <fmt/format.h>

namespace kestrel {

int64_t TensorShard::share(int64_t total, const std::string& what) const {
  if (total % n != 0)
    throw Error(fmt::format("tensor parallelism over {} ranks: {} {} do not split evenly", n, total, what));
  return total / n;
}

Weight TensorShard::rows(const Weight& w, int64_t first, int64_t count) const {
  if (!split()) return first == 0 && count == w.rows() ? w : weight_rows(w, first, count, w.name);
  const int64_t each = share(count, fmt::format("rows of {}", w.name));
  return weight_rows(w, first + rank * each, each, fmt::format("{}[rank {}]", w.name, rank));
}

Weight TensorShard::columns(const Weight& w) const {
  if (!split()) return w;
  const int64_t each = share(w.cols(), fmt::format("columns of {}", w.name));
  return weight_columns(w, rank * each, each, fmt::format("{}[rank {}]", w.name, rank));
}

std::vector<float> TensorShard::part(const std::vector<float>& v, int64_t first, int64_t count) const {
  if (v.empty()) return v;
  const int64_t each = share(count, "bias values");
  return {v.begin() + first + rank * each, v.begin() + first + (rank + 1) * each};
}

}  // namespace kestrel

#include "ops/compress_blocks.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace kestrel {

void compress_block(const float* rows, int64_t stride, int entries, int split, int absent, int64_t kv_off,
                    int64_t score_off, int64_t width, float* out) {
  thread_local std::vector<float> e;
  e.resize(static_cast<size_t>(entries));
  for (int64_t j = 0; j < width; j++) {
    float mx = -INFINITY;
    for (int i = absent; i < entries; i++)
      mx = std::max(mx, rows[i * stride + score_off + (i >= split ? width : 0) + j]);
    double sum = 0.0;
    for (int i = absent; i < entries; i++)
      sum += e[i] = std::exp(rows[i * stride + score_off + (i >= split ? width : 0) + j] - mx);
    const auto inv = static_cast<float>(1.0 / sum);
    double acc = 0.0;
    for (int i = absent; i < entries; i++) acc += rows[i * stride + kv_off + (i >= split ? width : 0) + j] * (e[i] * inv);
    out[j] = static_cast<float>(acc);
  }
}

namespace ops {
namespace {
void run_host(const OpContext&, const CompressBlocksArgs& a) {
  for (int64_t b = 0; b < a.n_blocks; b++)
    compress_block(OpContext::host(a.rows) + b * a.entries * a.stride, a.stride, a.entries, a.split, a.absent[b],
                   a.kv_off, a.score_off, a.width, OpContext::host(a.out) + b * a.width);
}
OpCost cost(const CompressBlocksArgs& a) {
  const double cells = static_cast<double>(a.n_blocks) * a.entries * a.width;
  return {8.0 * cells, 5.0 * cells};
}
}  // namespace

const Op<CompressBlocksArgs> compress_blocks("compress_blocks", run_host, cost);

}  // namespace ops
}  // namespace kestrel

#pragma once
// DeepSeek-V4's KV compressor (model/arch/deepseek4.cpp) as a named operator (backend/operator.h), with the
// one-block reference it runs.
#include <cstdint>

#include "backend/operator.h"

namespace kestrel {

// DeepSeek-V4's KV compressor, one block: out[j] = sum_i softmax_i(score_i[j]) * kv_i[j] over `entries` rows
// (row i at rows + i * stride; kv at kv_off, score at score_off, plus width when i >= split: the overlapped
// compressor reads the previous block's rows through the first half of its 2 * width state and the block's
// own through the second). The first `absent` entries count as kv 0 and score -inf (the first block's missing
// predecessor).
void compress_block(const float* rows, int64_t stride, int entries, int split, int absent, int64_t kv_off,
                    int64_t score_off, int64_t width, float* out);

namespace ops {
// The compressor over n_blocks blocks of `entries` gathered rows (block b's at rows + b * entries * stride;
// compress_block above), block b's first absent[b] entries absent: out row b (width floats).
struct CompressBlocksArgs {
  Act rows;
  int64_t n_blocks = 0, stride = 0;
  int entries = 0, split = 0;
  const int32_t* absent = nullptr;
  int64_t kv_off = 0, score_off = 0, width = 0;
  Act out;
};
extern const Op<CompressBlocksArgs> compress_blocks;
}  // namespace ops

}  // namespace kestrel

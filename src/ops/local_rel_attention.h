#pragma once
// Local attention with relative positions as a named operator (backend/operator.h): Gemma 4's audio Conformer
// (mmproj/gemma4_audio.cpp; llama.cpp's tools/mtmd/models/gemma4a.cpp). Each query i of each head sees the keys
// j in (i - window, i] (llama.cpp builds this from blocks of 12 queries over 24 keys and a mask; the unmasked keys
// are these), scored
//   s = (q'_i . k'_j) + (q'_i . rel[past - (i - j)])      q' = (q * q_scale) * q_dim, k' = (k * k_scale) * k_dim
//   s = tanh(s / softcap) * softcap
// then a softmax over the window and the weighted sum of v. rel holds past + 1 rows of heads x head_dim: the
// projected sinusoid of distances past, past - 1, ..., 0 (row r: distance past - r), used with the scaled q.
#include <cstdint>

#include "backend/operator.h"

namespace kestrel {

struct LocalRelAttentionShape {
  int64_t n = 0, heads = 0, head_dim = 0;
  int window = 0, past = 0;  // keys a query sees (itself included); rel's rows are past + 1 (window <= past + 1)
  float q_scale = 1, k_scale = 1, softcap = 0;
  const float* q_dim = nullptr;  // head_dim scales of q' and k' (null: none)
  const float* k_dim = nullptr;
};

// The reference over host rows: q, k, v, out are n rows of heads x head_dim; rel past + 1 such rows.
void local_rel_attention_rows(const float* q, const float* k, const float* v, const float* rel, float* out,
                              const LocalRelAttentionShape& s);

namespace ops {
struct LocalRelAttentionArgs {
  Act q, k, v, rel, out;
  LocalRelAttentionShape shape;
};
extern const Op<LocalRelAttentionArgs> local_rel_attention;
}  // namespace ops

}  // namespace kestrel

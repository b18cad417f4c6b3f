#include "kernels/moe_route.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kestrel {

namespace {
// The chosen weights renormalised (their sum held at least fp16's smallest normal, as llama.cpp clamps it)
// and scaled.
void finish_weights(const MoeRouting& r, float* w) {
  if (r.gating == ExpertGating::SoftmaxWeight) {  // ggml_soft_max over the chosen logits
    const float m = *std::max_element(w, w + r.n_used);
    float sum = 0.0f;
    for (int k = 0; k < r.n_used; k++) sum += w[k] = std::exp(w[k] - m);
    for (int k = 0; k < r.n_used; k++) w[k] /= sum;
  }
  if (r.normalize) {
    float sum = 0.0f;
    for (int k = 0; k < r.n_used; k++) sum += w[k];
    sum = std::max(sum, 6.103515625e-5f);
    for (int k = 0; k < r.n_used; k++) w[k] /= sum;
  }
  for (int k = 0; k < r.n_used; k++) w[k] *= r.scale;
}
}  // namespace

void moe_route(const MoeRouting& r, const float* logits, const float* bias, int64_t n, int32_t* ids, float* weights,
               float* scratch) {
  const int ne = r.n_expert;
  float* scores = scratch;
  float* select = scratch + ne;
  const int per_group = r.n_group > 1 ? ne / r.n_group : ne;
  constexpr float kExcluded = -std::numeric_limits<float>::infinity();
  for (int64_t t = 0; t < n; t++) {
    const float* x = logits + t * ne;
    if (r.gating == ExpertGating::Softmax) {
      const float m = *std::max_element(x, x + ne);
      float sum = 0.0f;
      for (int e = 0; e < ne; e++) sum += scores[e] = std::exp(x[e] - m);
      for (int e = 0; e < ne; e++) scores[e] /= sum;
    } else if (r.gating == ExpertGating::Sigmoid) {
      for (int e = 0; e < ne; e++) scores[e] = 1.0f / (1.0f + std::exp(-x[e]));
    } else if (r.gating == ExpertGating::SoftmaxWeight) {
      std::copy(x, x + ne, scores);
    } else {  // ggml_softplus, then ggml_sqrt
      for (int e = 0; e < ne; e++) scores[e] = std::sqrt(x[e] > 20.0f ? x[e] : std::log(1.0f + std::exp(x[e])));
    }
    int32_t* id = ids + t * r.n_used;
    float* w = weights + t * r.n_used;
    if (r.forced) {
      for (int k = 0; k < r.n_used; k++) {
        id[k] = r.forced[t * r.n_used + k];
        w[k] = scores[id[k]];
      }
      finish_weights(r, w);
      continue;
    }
    for (int e = 0; e < ne; e++) select[e] = r.select_by_logit ? x[e] : scores[e] + (bias ? bias[e] : 0.0f);

    if (r.n_group > 1 && r.n_group_used < r.n_group) {
      // Rank groups by the sum of their two best selection scores; exclude
      // every expert of the groups that do not make the cut.
      float group_score[64];
      int order[64];
      for (int g = 0; g < r.n_group; g++) {
        float best = kExcluded, second = kExcluded;
        for (int e = g * per_group; e < (g + 1) * per_group; e++) {
          if (select[e] > best)
            second = best, best = select[e];
          else if (select[e] > second)
            second = select[e];
        }
        group_score[g] = per_group > 1 ? best + second : best;
        order[g] = g;
      }
      // Insertion sort, best first, ties by group index (std::stable_sort
      // would allocate a buffer on every decode step).
      for (int i = 1; i < r.n_group; i++)
        for (int j = i; j > 0 && group_score[order[j]] > group_score[order[j - 1]]; j--) std::swap(order[j], order[j - 1]);
      for (int i = r.n_group_used; i < r.n_group; i++)
        for (int e = order[i] * per_group; e < (order[i] + 1) * per_group; e++) select[e] = kExcluded;
    }

    // Top n_used by selection score (ties: the lower id first).
    for (int k = 0; k < r.n_used; k++) {
      int best = -1;
      for (int e = 0; e < ne; e++)
        if (select[e] != kExcluded && (best < 0 || select[e] > select[best])) best = e;
      id[k] = best;
      w[k] = scores[best];
      select[best] = kExcluded;
    }
    finish_weights(r, w);
  }
}

}  // namespace kestrel

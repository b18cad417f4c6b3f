// DeepSeekMoE routing against a straightforward reference written from the
// DeepSeek-V3 model code's description (sort everything, mask whole groups,
// sort again), on random router logits: which experts, in which order, with
// which weights, for softmax and sigmoid gating, the selection bias, group
// limits, normalisation and the routed scaling factor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/moe_route.h"

namespace kestrel {
namespace {

struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

// One token, the obvious way.
Routed reference_route(const MoeRouting& r, const std::vector<float>& logits, const std::vector<float>& bias) {
  const int ne = r.n_expert;
  std::vector<double> scores(ne), select(ne);
  if (r.gating == ExpertGating::Softmax) {
    double sum = 0;
    for (int e = 0; e < ne; e++) sum += std::exp(static_cast<double>(logits[e]));
    for (int e = 0; e < ne; e++) scores[e] = std::exp(static_cast<double>(logits[e])) / sum;
  } else {
    for (int e = 0; e < ne; e++) scores[e] = 1.0 / (1.0 + std::exp(-static_cast<double>(logits[e])));
  }
  for (int e = 0; e < ne; e++) select[e] = scores[e] + (bias.empty() ? 0.0 : bias[e]);
  std::vector<bool> eligible(ne, true);
  if (r.n_group > 1 && r.n_group_used < r.n_group) {
    const int per = ne / r.n_group;
    std::vector<std::pair<double, int>> groups;
    for (int g = 0; g < r.n_group; g++) {
      std::vector<double> s(select.begin() + g * per, select.begin() + (g + 1) * per);
      std::sort(s.rbegin(), s.rend());
      groups.push_back({s[0] + (per > 1 ? s[1] : 0.0), g});
    }
    std::stable_sort(groups.begin(), groups.end(), [](auto a, auto b) { return a.first > b.first; });
    for (int i = r.n_group_used; i < r.n_group; i++)
      for (int e = 0; e < per; e++) eligible[groups[i].second * per + e] = false;
  }
  std::vector<int> order;
  for (int e = 0; e < ne; e++)
    if (eligible[e]) order.push_back(e);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return select[a] > select[b]; });
  Routed out;
  double sum = 0;
  for (int k = 0; k < r.n_used; k++) sum += scores[order[k]];
  for (int k = 0; k < r.n_used; k++) {
    out.ids.push_back(order[k]);
    out.weights.push_back(static_cast<float>(scores[order[k]] / (r.normalize ? sum : 1.0) * r.scale));
  }
  return out;
}

void check(const MoeRouting& r, bool with_bias, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  const int n = 33;
  std::vector<float> logits(static_cast<size_t>(n) * r.n_expert), bias;
  for (auto& x : logits) x = dist(rng);
  if (with_bias) {
    // Large enough to change which experts win, so ignoring it (or weighting by it) fails.
    bias.resize(r.n_expert);
    for (auto& x : bias) x = dist(rng) * 0.5f;
  }
  std::vector<int32_t> ids(static_cast<size_t>(n) * r.n_used);
  std::vector<float> weights(ids.size()), scratch(2 * r.n_expert);
  moe_route(r, logits.data(), with_bias ? bias.data() : nullptr, n, ids.data(), weights.data(), scratch.data());
  int changed_by_bias = 0;
  for (int t = 0; t < n; t++) {
    const std::vector<float> row(logits.begin() + t * r.n_expert, logits.begin() + (t + 1) * r.n_expert);
    const Routed want = reference_route(r, row, bias);
    for (int k = 0; k < r.n_used; k++) {
      ASSERT_EQ(ids[t * r.n_used + k], want.ids[k]) << "token " << t << " choice " << k;
      ASSERT_NEAR(weights[t * r.n_used + k], want.weights[k], 1e-5f) << "token " << t << " choice " << k;
    }
    if (with_bias) changed_by_bias += reference_route(r, row, {}).ids != want.ids;
  }
  if (with_bias) {
    EXPECT_GT(changed_by_bias, 0) << "the bias never changed a choice: the test would not notice it";
  }
}

TEST(MoeRoute, SoftmaxTopKWithoutNormalisation) {
  MoeRouting r;
  r.n_expert = 8;
  r.n_used = 2;
  check(r, false, 1);  // DeepSeek-V2-Lite's routing
  r.scale = 16.0f;     // DeepSeek-V2's routed scaling factor
  check(r, false, 2);
}

TEST(MoeRoute, SigmoidWithSelectionBiasGroupsNormalisationAndScale) {
  MoeRouting r;
  r.n_expert = 16;
  r.n_used = 4;
  r.gating = ExpertGating::Sigmoid;
  r.n_group = 4;
  r.n_group_used = 2;
  r.normalize = true;
  r.scale = 2.5f;
  check(r, true, 3);  // the deepseek3-tiny reference model's routing
  r.n_expert = 64;    // V3's proportions (256 experts, 8 groups, 4 used, top 8), smaller
  r.n_used = 8;
  r.n_group = 8;
  r.n_group_used = 4;
  check(r, true, 4);
}

TEST(MoeRoute, GroupLimitExcludesExpertsOutsideTheBestGroups) {
  MoeRouting r;
  r.n_expert = 8;
  r.n_used = 2;
  r.gating = ExpertGating::Sigmoid;
  r.n_group = 4;
  r.n_group_used = 1;
  // Expert 0 has the single best score, but group 3 (experts 6, 7) has the best pair.
  const std::vector<float> logits = {5.0f, -5.0f, 0.0f, 0.0f, 0.0f, 0.0f, 3.0f, 3.0f};
  int32_t ids[2];
  float w[2], scratch[16];
  moe_route(r, logits.data(), nullptr, 1, ids, w, scratch);
  EXPECT_EQ(ids[0], 6);
  EXPECT_EQ(ids[1], 7);
  r.n_group_used = 4;  // no limit: the best two overall
  moe_route(r, logits.data(), nullptr, 1, ids, w, scratch);
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(ids[1], 6);
  // Weights come from the unbiased scores: a bias that picks expert 1 leaves its weight sigmoid(-5).
  std::vector<float> bias(8, 0.0f);
  bias[1] = 10.0f;
  moe_route(r, logits.data(), bias.data(), 1, ids, w, scratch);
  EXPECT_EQ(ids[0], 1);
  EXPECT_NEAR(w[0], 1.0f / (1.0f + std::exp(5.0f)), 1e-7f);
}

}  // namespace
}  // namespace kestrel

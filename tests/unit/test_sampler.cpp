// Sampling: greedy, determinism by seed, the truncation rules and penalties,
// and rejection of out-of-range parameters.
#include <gmock/gmock.h>

#include <cmath>
#include <map>

#include "core/error.h"
#include "runtime/sampler.h"

namespace kestrel {
namespace {

std::vector<float> ramp_logits(int n) {
  std::vector<float> l(n);
  for (int i = 0; i < n; i++) l[i] = std::sin(static_cast<float>(i) * 1.7f) * 3.0f;
  return l;
}

std::vector<int32_t> draw(SamplingParams p, int count) {
  const auto base = ramp_logits(100);
  Sampler s(p, 100);
  std::vector<int32_t> out, history;
  for (int i = 0; i < count; i++) {
    auto l = base;
    out.push_back(s.sample(l.data(), history));
  }
  return out;
}

TEST(Sampler, TemperatureZeroIsArgmax) {
  SamplingParams p;
  p.temperature = 0.0f;
  auto l = ramp_logits(100);
  const int32_t want = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
  Sampler s(p, 100);
  EXPECT_EQ(s.sample(l.data(), {}), want);
}

TEST(Sampler, LogitBiasBansAndFavoursTokens) {
  const auto l = ramp_logits(100);
  const int32_t top = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
  SamplingParams p;
  p.temperature = 0.0f;
  p.logit_bias = {{top, -100.0f}};
  auto x = l;
  EXPECT_NE(Sampler(p, 100).sample(x.data(), {}), top);
  // Sampled at temperature 1 many times, a banned token never comes; +100 makes one certain.
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  for (const int32_t t : draw(p, 2000)) EXPECT_NE(t, top);
  p.logit_bias = {{7, 100.0f}};
  for (const int32_t t : draw(p, 200)) EXPECT_EQ(t, 7);
  // A bias moves the logit by exactly its value: +1.5 on a token equal to the top plus 1.5 ties it.
  p.temperature = 0.0f;
  p.logit_bias = {{3, l[top] - l[3] + 0.01f}};
  x = l;
  EXPECT_EQ(Sampler(p, 100).sample(x.data(), {}), 3);
  p.logit_bias = {{3, 101.0f}};
  EXPECT_THROW(p.validate(), Error);
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDifferentTokens) {
  SamplingParams p;
  p.temperature = 1.5f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 42;
  const auto a = draw(p, 200), b = draw(p, 200);
  EXPECT_EQ(a, b);
  p.seed = 43;
  EXPECT_NE(draw(p, 200), a);
}

TEST(Sampler, TopKOneIsGreedyAndTopKLimitsTheSupport) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 1;
  p.seed = 7;
  const auto l = ramp_logits(100);
  const int32_t best = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
  for (int32_t t : draw(p, 50)) EXPECT_EQ(t, best);

  p.top_k = 3;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  std::vector<int32_t> order(100);
  for (int i = 0; i < 100; i++) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b]; });
  std::map<int32_t, int> seen;
  for (int32_t t : draw(p, 500)) seen[t]++;
  EXPECT_EQ(seen.size(), 3u);
  for (int i = 0; i < 3; i++) EXPECT_GT(seen[order[i]], 0);
}

TEST(Sampler, FrequenciesFollowTheSoftmax) {
  // Two tokens with logits log(3) and 0 at temperature 1: a 3:1 split.
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 1;
  Sampler s(p, 2);
  int first = 0;
  const int n = 20000;
  for (int i = 0; i < n; i++) {
    float l[2] = {std::log(3.0f), 0.0f};
    first += s.sample(l, {}) == 0;
  }
  EXPECT_NEAR(static_cast<double>(first) / n, 0.75, 0.015);
}

TEST(Sampler, MinPAndTopPDropUnlikelyTokens) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.5f;  // keeps tokens with p >= half the best
  p.seed = 3;
  Sampler s(p, 3);
  for (int i = 0; i < 300; i++) {
    float l[3] = {2.0f, 1.9f, -1.0f};
    EXPECT_NE(s.sample(l, {}), 2);
  }
  p.min_p = 0.0f;
  p.top_p = 0.5f;  // the best token alone already covers half the mass
  Sampler t(p, 3);
  for (int i = 0; i < 300; i++) {
    float l[3] = {3.0f, 1.0f, 0.0f};
    EXPECT_EQ(t.sample(l, {}), 0);
  }
}

TEST(Sampler, PenaltiesLowerRepeatedTokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.repeat_penalty = 2.0f;
  Sampler s(p, 3);
  float l[3] = {2.0f, 1.5f, -1.0f};
  EXPECT_EQ(s.sample(l, {0}), 1);  // 2.0 / 2 = 1.0 < 1.5
  EXPECT_FLOAT_EQ(l[0], 1.0f);

  SamplingParams q;
  q.temperature = 0.0f;
  q.frequency_penalty = 0.5f;
  q.presence_penalty = 0.25f;
  Sampler t(q, 3);
  float m[3] = {2.0f, 1.5f, -1.0f};
  t.sample(m, {0, 0, 2});
  EXPECT_FLOAT_EQ(m[0], 2.0f - 2 * 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(m[1], 1.5f);
  EXPECT_FLOAT_EQ(m[2], -1.0f - 0.5f - 0.25f);
}

// From a row's best candidates alone (a device's top-k: kernels/ops.h top_k's order), the sampler draws the
// same tokens, seed for seed, as from the whole row — with ties among the logits, top-p, min-p and a
// temperature — and says how many candidates it needs: 1 greedy, top_k, or -1 (the whole row: top_k off, a
// penalty, a bias).
TEST(Sampler, TheBestCandidatesAloneGiveTheSameDraws) {
  SamplingParams p;
  p.temperature = 0.9f, p.top_k = 12, p.top_p = 0.9f, p.min_p = 0.02f, p.seed = 11;
  Sampler whole(p, 200), best(p, 200);
  EXPECT_EQ(best.best_needed(), 12);
  std::vector<int32_t> history;
  for (int step = 0; step < 50; step++) {
    auto l = ramp_logits(200);
    for (int i = 0; i < 200; i++) l[i] += 0.05f * static_cast<float>((i * 31 + step * 7) % 11);
    l[150] = l[151] = l[3];  // ties: the lower id ranks first
    std::vector<int32_t> ids(16);
    std::vector<float> vals(16);
    top_k(l.data(), 200, 16, ids.data(), vals.data());
    auto row = l;
    const int32_t want = whole.sample(row.data(), history);
    EXPECT_EQ(best.sample_best(ids.data(), vals.data(), 16), want) << "step " << step;
    history.push_back(want);
  }
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  EXPECT_EQ(Sampler(greedy, 200).best_needed(), 1);
  for (auto change : {+[](SamplingParams& q) { q.top_k = 0; }, +[](SamplingParams& q) { q.repeat_penalty = 1.1f; },
                      +[](SamplingParams& q) { q.presence_penalty = 0.5f; },
                      +[](SamplingParams& q) {
                        q.logit_bias = {{3, 1.0f}};
                      }}) {
    SamplingParams q = p;
    change(q);
    EXPECT_EQ(Sampler(q, 200).best_needed(), -1);
  }
  EXPECT_THROW(best.sample_best(std::vector<int32_t>(4).data(), std::vector<float>(4).data(), 4), Error);
}

TEST(Sampler, OutOfRangeParametersAreNamed) {
  auto error_for = [](auto mutate) -> std::string {
    SamplingParams p;
    mutate(p);
    try {
      p.validate();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  using ::testing::HasSubstr;
  EXPECT_THAT(error_for([](SamplingParams& p) { p.temperature = -1; }), HasSubstr("temperature"));
  EXPECT_THAT(error_for([](SamplingParams& p) { p.temperature = NAN; }), HasSubstr("temperature"));
  EXPECT_THAT(error_for([](SamplingParams& p) { p.top_k = -2; }), HasSubstr("top_k"));
  EXPECT_THAT(error_for([](SamplingParams& p) { p.top_p = 0; }), HasSubstr("top_p"));
  EXPECT_THAT(error_for([](SamplingParams& p) { p.top_p = 1.5f; }), HasSubstr("top_p"));
  EXPECT_THAT(error_for([](SamplingParams& p) { p.min_p = 2; }), HasSubstr("min_p"));
  EXPECT_THAT(error_for([](SamplingParams& p) { p.repeat_penalty = 0; }), HasSubstr("repeat_penalty"));
  EXPECT_THAT(error_for([](SamplingParams& p) { p.frequency_penalty = 3; }), HasSubstr("frequency_penalty"));
  EXPECT_THAT(error_for([](SamplingParams& p) { p.presence_penalty = -3; }), HasSubstr("presence_penalty"));
  EXPECT_EQ(error_for([](SamplingParams&) {}), "");
}

}  // namespace
}  // namespace kestrel

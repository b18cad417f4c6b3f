// Paged attention against a direct softmax(q.k) . v computed in double, for
// the per-head path and the split-over-positions path, with a scattered
// block table.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/attention.h"

namespace kestrel {
namespace {

void check(int n_head, int n_kv, int hd, int32_t len, int threads) {
  const int block = 16;
  const int64_t blocks = (len + block - 1) / block;
  std::mt19937 rng(len + n_head);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  // Blocks in reverse order, so a table that is ignored gives wrong answers.
  std::vector<int32_t> table(blocks);
  for (int64_t i = 0; i < blocks; i++) table[i] = static_cast<int32_t>(blocks - 1 - i);
  const int64_t width = static_cast<int64_t>(n_kv) * hd;
  std::vector<float> k(blocks * block * width), v(k.size()), q(n_head * hd), out(q.size());
  for (auto& x : k) x = dist(rng);
  for (auto& x : v) x = dist(rng);
  for (auto& x : q) x = dist(rng);
  const int32_t pos = len - 1;
  const int32_t* tables[1] = {table.data()};
  ThreadPool pool(threads);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  attention_paged(pool, {k.data(), v.data(), width, width, block}, {1, q.data(), out.data(), &pos, tables},
                  {n_head, n_kv, hd, scale});
  for (int h = 0; h < n_head; h++) {
    const int kvh = h / (n_head / n_kv);
    std::vector<double> scores(len);
    double mx = -1e300;
    for (int32_t p = 0; p < len; p++) {
      const int64_t slot = static_cast<int64_t>(table[p / block]) * block + p % block;
      double sc = 0;
      for (int d = 0; d < hd; d++) sc += static_cast<double>(q[h * hd + d]) * k[slot * width + kvh * hd + d];
      scores[p] = sc * scale;
      mx = std::max(mx, scores[p]);
    }
    double sum = 0;
    for (auto& sc : scores) sum += (sc = std::exp(sc - mx));
    for (int d = 0; d < hd; d++) {
      double want = 0;
      for (int32_t p = 0; p < len; p++) {
        const int64_t slot = static_cast<int64_t>(table[p / block]) * block + p % block;
        want += scores[p] / sum * v[slot * width + kvh * hd + d];
      }
      ASSERT_NEAR(out[h * hd + d], want, 1e-4) << "head " << h << " dim " << d << " len " << len;
    }
  }
}

TEST(Attention, ManyHeadsPerHeadPath) { check(8, 2, 16, 37, 2); }
TEST(Attention, OneHeadLongContextSplitsAcrossThreads) { check(1, 1, 32, 1000, 2); }
TEST(Attention, SplitWithOddLengthsAndGroups) {
  for (int32_t len : {1, 129, 257, 513}) check(2, 1, 8, len, 2);
}

}  // namespace
}  // namespace kestrel

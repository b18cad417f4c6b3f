// DeepSeek sparse attention's lightning indexer (ops/lightning_indexer.h) against the definition
// computed directly in double: score(j) = sum_h relu(q_h . k_j) w_h, the top_k positions (ties to the
// earlier one) listed ascending; over scattered block tables, f32 and q8_0 keys, one thread and two (both
// of the kernel's ways of splitting the work), rows below top_k, and a tie at the boundary.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "ops/lightning_indexer.h"
#include "kernels/ops.h"

namespace kestrel {
namespace {

struct Keys {
  KvRowFormat format;
  int block = 8;
  std::vector<uint8_t> store;
  std::vector<int32_t> table;
  PagedKvLayerView view() const {
    return {store.data(), store.data(), static_cast<int64_t>(format.bytes(hd)), 0, block, format, format};
  }
  int64_t hd = 0;
};

// len positions of hd-wide keys in blocks stored in reverse order (an ignored table gives wrong answers).
Keys make_keys(const std::vector<float>& k, int64_t len, int64_t hd, KvType type) {
  Keys s;
  s.hd = hd;
  s.format = KvRowFormat(type, hd);
  const int64_t blocks = (len + s.block - 1) / s.block, row = static_cast<int64_t>(s.format.bytes(hd));
  s.store.assign(static_cast<size_t>(blocks * s.block * row), 0);
  for (int64_t b = 0; b < blocks; b++) s.table.push_back(static_cast<int32_t>(blocks - 1 - b));
  for (int64_t p = 0; p < len; p++) {
    const int64_t slot = int64_t{s.table[p / s.block]} * s.block + p % s.block;
    s.format.quantize(k.data() + p * hd, s.store.data() + slot * row, hd);
  }
  return s;
}

// The keys as the format gives them back (what the indexer must score).
std::vector<float> stored_keys(const Keys& s, int64_t len) {
  std::vector<float> out(static_cast<size_t>(len * s.hd));
  const PagedKvLayerView v = s.view();
  for (int64_t p = 0; p < len; p++) {
    const int64_t slot = int64_t{s.table[p / s.block]} * s.block + p % s.block;
    s.format.dequantize(v.k_row(slot), 0, out.data() + p * s.hd, s.hd);
  }
  return out;
}

std::vector<int32_t> expected_top_k(const float* q, const float* w, const std::vector<float>& k, int32_t pos,
                                    const IndexerShape& s) {
  const int32_t len = pos + 1;
  std::vector<int32_t> all(static_cast<size_t>(len));
  std::iota(all.begin(), all.end(), 0);
  if (len <= s.top_k) return all;
  std::vector<double> score(static_cast<size_t>(len));
  for (int32_t j = 0; j < len; j++)
    for (int h = 0; h < s.n_head; h++) {
      double d = 0;
      for (int i = 0; i < s.head_dim; i++) d += double{q[h * s.head_dim + i]} * k[j * s.head_dim + i];
      score[j] += std::max(0.0, d) * w[h];
    }
  std::stable_sort(all.begin(), all.end(), [&](int32_t a, int32_t b) { return score[a] > score[b]; });
  all.resize(static_cast<size_t>(s.top_k));
  std::sort(all.begin(), all.end());
  return all;
}

void check(KvType type, int threads, int n_rows) {
  IndexerShape s{4, 32, 6};
  const int64_t len = 53;  // candidates
  std::mt19937 rng(7 + n_rows);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> k(static_cast<size_t>(len * s.head_dim));
  for (auto& x : k) x = dist(rng);
  const Keys keys = make_keys(k, len, s.head_dim, type);
  const std::vector<float> cand = stored_keys(keys, len);
  // Rows at (last candidate) positions spread over the sequence, the first few below top_k; with several
  // rows, one with no candidate yet (-1: a DeepSeek-V4 row before its first completed block).
  std::vector<float> q(static_cast<size_t>(n_rows * s.n_head * s.head_dim)), w(static_cast<size_t>(n_rows * s.n_head));
  for (auto& x : q) x = dist(rng);
  for (auto& x : w) x = dist(rng);
  std::vector<int32_t> pos(static_cast<size_t>(n_rows));
  std::vector<const int32_t*> tables(static_cast<size_t>(n_rows), keys.table.data());
  for (int r = 0; r < n_rows; r++) pos[r] = static_cast<int32_t>((len - 1) - r * 7 % len);
  pos[0] = 2;  // below top_k
  if (n_rows > 2) pos[1] = -1;
  std::vector<int32_t> sel(static_cast<size_t>(n_rows * s.top_k), -1), counts(static_cast<size_t>(n_rows), -1);
  ThreadPool pool(threads);
  lightning_indexer_top_k(threads > 1 ? &pool : nullptr, keys.view(),
                          {n_rows, q.data(), w.data(), pos.data(), tables.data()}, s, sel.data(), counts.data());
  for (int r = 0; r < n_rows; r++) {
    const auto want = expected_top_k(q.data() + r * s.n_head * s.head_dim, w.data() + r * s.n_head, cand, pos[r], s);
    ASSERT_EQ(counts[r], static_cast<int32_t>(want.size())) << "row " << r;
    const std::vector<int32_t> got(sel.begin() + r * s.top_k, sel.begin() + r * s.top_k + counts[r]);
    EXPECT_EQ(got, want) << "row " << r << " at position " << pos[r] << " (" << kv_type_name(type) << ", " << threads
                         << " threads)";
  }
}

TEST(LightningIndexer, SelectsTheTopKOfTheDefinitionOneRowPerThread) { check(KvType::F32, 2, 6); }
TEST(LightningIndexer, SelectsTheTopKOfTheDefinitionPositionsSplitAcrossThreads) { check(KvType::F32, 2, 2); }
TEST(LightningIndexer, SelectsTheTopKOfTheDefinitionOnOneThread) { check(KvType::F32, 1, 5); }
TEST(LightningIndexer, ScoresTheKeysAsTheirFormatStoresThem) {
  check(KvType::Q8_0, 2, 6);
  check(KvType::Q4, 1, 3);
}

TEST(LightningIndexer, AnExactTieAtTheBoundaryGoesToTheEarlierPosition) {
  // Zero keys score exactly 0; two positive-scoring keys, then four zeros compete for the last two places.
  const IndexerShape s{2, 64, 4};
  const int64_t len = 9;
  std::vector<float> q(static_cast<size_t>(s.n_head * s.head_dim), 0.5f), w = {1.0f, 0.5f};
  std::vector<float> k(static_cast<size_t>(len * s.head_dim), 0.0f);
  for (int i = 0; i < s.head_dim; i++) k[3 * s.head_dim + i] = 1.0f, k[7 * s.head_dim + i] = 2.0f;
  for (int i = 0; i < s.head_dim; i++) k[5 * s.head_dim + i] = -1.0f;  // negative dots: relu 0, a tie too
  const Keys keys = make_keys(k, len, s.head_dim, KvType::F32);
  const int32_t pos = static_cast<int32_t>(len - 1);
  const int32_t* table = keys.table.data();
  std::vector<int32_t> sel(4), counts(1);
  lightning_indexer_top_k(nullptr, keys.view(), {1, q.data(), w.data(), &pos, &table}, s, sel.data(), counts.data());
  EXPECT_EQ(counts[0], 4);
  EXPECT_EQ(sel, (std::vector<int32_t>{0, 1, 3, 7}));
  EXPECT_DOUBLE_EQ(lightning_indexer_score(q.data(), w.data(), k.data() + 7 * s.head_dim, s),
                   2.0 * 0.5 * 64 * 1.5);
}

TEST(LayerNorm, NormalisesThenScalesAndShiftsAsTheDefinition) {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(1.0f, 2.0f);
  const int64_t rows = 3, dim = 40;
  std::vector<float> x(rows * dim), w(dim), b(dim), y(x.size());
  for (auto* v : {&x, &w, &b})
    for (auto& e : *v) e = dist(rng);
  layernorm_rows(x.data(), w.data(), b.data(), y.data(), rows, dim, 1e-6f);
  for (int64_t r = 0; r < rows; r++) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < dim; i++) mean += x[r * dim + i];
    mean /= dim;
    for (int64_t i = 0; i < dim; i++) var += (x[r * dim + i] - mean) * (x[r * dim + i] - mean);
    var /= dim;
    for (int64_t i = 0; i < dim; i++) {
      const double want = (x[r * dim + i] - mean) / std::sqrt(var + 1e-6) * w[i] + b[i];
      EXPECT_NEAR(y[r * dim + i], want, 1e-5 * (1 + std::fabs(want))) << r << "," << i;
    }
  }
}

}  // namespace
}  // namespace kestrel

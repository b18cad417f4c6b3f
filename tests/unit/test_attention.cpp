// Paged attention against a direct softmax(q.k) . v computed in double, for
// both kernels (16-row tiles and per row), the split-over-positions path,
// scattered block tables, and batches mixing sequences and positions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>

#include "hw/cpu_features.h"
#include "kernels/attention.h"
#include "kernels/attention_tile.h"

namespace kestrel {
namespace {

// Set while a test runs every tile table this CPU has (Best then means that table).
const AttentionTiles* g_tiles = nullptr;

void run_attention(ThreadPool& pool, const PagedKvLayerView& kv, const AttentionBatch& b, const AttentionShape& s,
                   AttentionKernel kernel) {
  if (g_tiles && kernel == AttentionKernel::Best) attention_paged_tiles(pool, kv, b, s, *g_tiles);
  else attention_paged(pool, kv, b, s, kernel);
}

void check(int n_head, int n_kv, int hd, int32_t len, int threads, AttentionKernel kernel = AttentionKernel::Best,
           bool sinks = false) {
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
  // Sinks around the scores' scale, some far above them (they then take most of the weight).
  std::vector<float> sink(static_cast<size_t>(n_head));
  for (int h = 0; h < n_head; h++) sink[h] = h % 3 == 2 ? 6.0f : dist(rng);
  AttentionShape shape{n_head, n_kv, hd, scale};
  if (sinks) shape.sinks = sink.data();
  run_attention(pool, PagedKvLayerView::f32(k.data(), v.data(), width, width, block), {1, q.data(), out.data(), &pos, tables},
                shape, kernel);
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
    if (sinks) sum += std::exp(static_cast<double>(sink[h]) - mx);  // in the denominator only
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

const AttentionKernel kKernels[] = {AttentionKernel::Best, AttentionKernel::PerRow};

TEST(Attention, ManyHeadsPerHeadPath) {
  for (auto kernel : kKernels) check(8, 2, 16, 37, 2, kernel);
}
// gpt-oss's and DeepSeek-V4's sinks: one logit per head in the softmax's denominator, on every path
// (16-row tiles, per row, positions split over threads and merged).
TEST(Attention, SinksJoinTheSoftmaxDenominator) {
  for (auto kernel : kKernels)
    for (int32_t len : {1, 7, 300, 1000}) {
      check(4, 1, 64, len, 2, kernel, true);
      check(8, 2, 16, len, 1, kernel, true);
    }
}
TEST(Attention, OneHeadLongContextSplitsAcrossThreads) {
  for (auto kernel : kKernels) check(1, 1, 32, 1000, 2, kernel);
}
TEST(Attention, SplitWithOddLengthsAndGroups) {
  for (auto kernel : kKernels)
    for (int32_t len : {1, 129, 257, 513}) {
      check(2, 1, 8, len, 2, kernel);
      check(4, 1, 64, len, 2, kernel);
    }
}

// Several sequences in one batch (a prefill chunk of one, decode tokens of
// others, interleaved), each with its own scattered table, block sizes that
// do and do not divide 16, GQA groups smaller and larger than a tile.
void check_batch(int n_head, int n_kv, int hd, int block, AttentionKernel kernel) {
  SCOPED_TRACE(::testing::Message() << n_head << " heads, " << n_kv << " kv, hd " << hd << ", block " << block);
  struct Seq {
    int32_t len;
    std::vector<int32_t> table;
  };
  std::vector<Seq> seqs = {{70, {}}, {5, {}}, {33, {}}};
  int32_t next_block = 0;
  for (auto& sq : seqs) {
    const int32_t nb = (sq.len + block - 1) / block;
    for (int32_t i = 0; i < nb; i++) sq.table.push_back(next_block + nb - 1 - i);  // reversed
    next_block += nb;
  }
  const int64_t width = static_cast<int64_t>(n_kv) * hd;
  std::mt19937 rng(hd + block);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> k(next_block * block * width), v(k.size());
  for (auto& x : k) x = dist(rng);
  for (auto& x : v) x = dist(rng);
  // Tokens: sequence 0 positions 50..69 (a prefill chunk), then sequence 1's
  // last position, sequence 2's positions 30..32, and one more of sequence 0.
  std::vector<std::pair<int, int32_t>> tokens;
  for (int32_t p = 50; p < 69; p++) tokens.push_back({0, p});
  tokens.push_back({1, 4});
  for (int32_t p = 30; p < 33; p++) tokens.push_back({2, p});
  tokens.push_back({0, 69});
  const int64_t n = static_cast<int64_t>(tokens.size());
  std::vector<float> q(n * n_head * hd), out(q.size(), 0.0f);
  for (auto& x : q) x = dist(rng);
  std::vector<int32_t> pos(n);
  std::vector<const int32_t*> tables(n);
  for (int64_t t = 0; t < n; t++) pos[t] = tokens[t].second, tables[t] = seqs[tokens[t].first].table.data();
  ThreadPool pool(2);
  const float scale = 0.3f;
  run_attention(pool, PagedKvLayerView::f32(k.data(), v.data(), width, width, block), {n, q.data(), out.data(), pos.data(), tables.data()},
                  {n_head, n_kv, hd, scale}, kernel);
  const int group = n_head / n_kv;
  for (int64_t t = 0; t < n; t++)
    for (int h = 0; h < n_head; h++) {
      const int32_t* table = tables[t];
      const int kvh = h / group;
      auto slot = [&](int32_t p) { return static_cast<int64_t>(table[p / block]) * block + p % block; };
      std::vector<double> sc(pos[t] + 1);
      double mx = -1e300, sum = 0;
      for (int32_t p = 0; p <= pos[t]; p++) {
        double d = 0;
        for (int i = 0; i < hd; i++) d += double(q[(t * n_head + h) * hd + i]) * k[slot(p) * width + kvh * hd + i];
        mx = std::max(mx, sc[p] = d * scale);
      }
      for (auto& x : sc) sum += (x = std::exp(x - mx));
      for (int i = 0; i < hd; i++) {
        double want = 0;
        for (int32_t p = 0; p <= pos[t]; p++) want += sc[p] / sum * v[slot(p) * width + kvh * hd + i];
        ASSERT_NEAR(out[(t * n_head + h) * hd + i], want, 1e-4) << "token " << t << " head " << h << " dim " << i;
      }
    }
}

TEST(Attention, BatchesOfSeveralSequences) {
  for (auto kernel : kKernels)
    for (int block : {16, 5, 32}) {
      check_batch(8, 2, 64, block,
                  kernel);  // 4 heads per group: 4 tokens per tile
      check_batch(32, 1, 16, block,
                  kernel);                   // 32 heads per group: two tiles per token
      check_batch(3, 3, 32, block, kernel);  // no sharing: 16 tokens per tile
    }
}

TEST(Attention, TiledKernelCoversTheModelsHeadSizes) {
  // The fast path must actually run for Llama-family head sizes on every machine with AVX2.
  if (selected_isa() == IsaLevel::Scalar) GTEST_SKIP() << "no AVX2 on this CPU/build: the per-row kernel alone";
  const AttentionTiles* tiles = attention_tiles();
  ASSERT_NE(tiles, nullptr) << isa_name(selected_isa()) << " selected but no tile kernel";
  for (int hd : {64, 128}) EXPECT_TRUE(tiles->fits(hd, hd)) << hd;
  EXPECT_FALSE(tiles->fits(4, 4));      // falls back to the per-row kernel
  EXPECT_TRUE(tiles->fits(576, 512));  // DeepSeek's absorbed MLA
}

// MLA's absorbed attention: one shared latent "KV head" whose rows hold
// [latent | rotary key]; the keys are the whole row (hd) and the values its
// first vd floats, read from the same storage. Queries of several tokens of
// one sequence at different positions (prefill), against a double reference.
void check_latent(int n_head, int hd, int vd, int32_t len, int n_tokens, int threads, AttentionKernel kernel) {
  const int block = 16;
  const int64_t blocks = (len + block - 1) / block;
  std::mt19937 rng(hd * 7 + len);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<int32_t> table(blocks);
  for (int64_t i = 0; i < blocks; i++) table[i] = static_cast<int32_t>(blocks - 1 - i);
  std::vector<float> latent(blocks * block * hd), q(n_tokens * n_head * hd), out(n_tokens * n_head * vd, -1.0f);
  for (auto& x : latent) x = dist(rng);
  for (auto& x : q) x = dist(rng);
  std::vector<int32_t> pos(n_tokens);
  std::vector<const int32_t*> tables(n_tokens, table.data());
  for (int t = 0; t < n_tokens; t++) pos[t] = len - n_tokens + t;
  ThreadPool pool(threads);
  const float scale = 0.3f;
  run_attention(pool, PagedKvLayerView::f32(latent.data(), latent.data(), hd, hd, block),
                  {n_tokens, q.data(), out.data(), pos.data(), tables.data()}, {n_head, 1, hd, scale, vd}, kernel);
  for (int t = 0; t < n_tokens; t++)
    for (int h = 0; h < n_head; h++) {
      const float* qh = q.data() + (t * n_head + h) * hd;
      std::vector<double> w(pos[t] + 1);
      double mx = -1e300, sum = 0;
      for (int32_t p = 0; p <= pos[t]; p++) {
        const float* row = latent.data() + (static_cast<int64_t>(table[p / block]) * block + p % block) * hd;
        double sc = 0;
        for (int d = 0; d < hd; d++) sc += static_cast<double>(qh[d]) * row[d];
        mx = std::max(mx, w[p] = sc * scale);
      }
      for (auto& x : w) sum += (x = std::exp(x - mx));
      for (int d = 0; d < vd; d++) {
        double want = 0;
        for (int32_t p = 0; p <= pos[t]; p++)
          want += w[p] / sum * latent[(static_cast<int64_t>(table[p / block]) * block + p % block) * hd + d];
        ASSERT_NEAR(out[(t * n_head + h) * vd + d], want, 1e-4) << "token " << t << " head " << h << " dim " << d;
      }
    }
}

TEST(Attention, LatentValuesReadFromTheKeyRows) {
  for (auto kernel : kKernels) {
    check_latent(4, 40, 32, 37, 5, 2, kernel);      // the tiny reference models' shape: per-row kernel
    check_latent(16, 80, 64, 150, 3, 2, kernel);    // tiles, and a value size unlike the key size
    check_latent(8, 576, 512, 300, 1, 2, kernel);   // DeepSeek-V2/V3 decode: split over positions
  }
}

// Every tile kernel this CPU runs (AVX2's two 8-lane passes and AVX-512's 16 lanes), whichever the level
// picks: the same checks against the double reference.
TEST(Attention, EveryTileKernelThisCpuRuns) {
  std::vector<const AttentionTiles*> tables;
  for (IsaLevel isa : {IsaLevel::Avx2, IsaLevel::Avx512})
    if (const AttentionTiles* t = attention_tiles(isa); t && std::find(tables.begin(), tables.end(), t) == tables.end())
      tables.push_back(t);
  if (tables.empty()) GTEST_SKIP() << "no AVX2 on this CPU/build: the per-row kernel alone";
  for (const AttentionTiles* t : tables) {
    std::cout << "[ path     ] attention tiles: " << t->isa << "\n";
    g_tiles = t;
    for (int hd : {64, 128}) EXPECT_TRUE(t->fits(hd, hd)) << t->isa << " " << hd;
    check(8, 2, 16, 37, 2, AttentionKernel::Best);
    check(1, 1, 32, 1000, 2, AttentionKernel::Best);
    for (int32_t len : {1, 129, 257}) check(3, 1, 64, len, 2, AttentionKernel::Best);
    for (int block : {16, 5}) {
      check_batch(8, 2, 64, block, AttentionKernel::Best);
      check_batch(32, 1, 16, block, AttentionKernel::Best);
      check_batch(3, 3, 32, block, AttentionKernel::Best);
    }
    check_latent(16, 80, 64, 150, 3, 2, AttentionKernel::Best);
    check_latent(8, 576, 512, 300, 1, 2, AttentionKernel::Best);
    g_tiles = nullptr;
  }
}

}  // namespace
}  // namespace kestrel

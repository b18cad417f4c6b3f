// The dense attention by GEMMs (kernels/attention_dense.h: a vision tower's patches, every query seeing every
// key) against the paged kernel on the same keys and values: GQA, a query count that is not a multiple of the
// block, a head size the widest tiles do not take; and the calls it must leave to the paged kernel.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/attention_dense.h"
#include "kernels/dense_rows.h"
#include "test_support.h"

namespace kestrel {
namespace attention_dense_test {

TEST(AttentionDense, GemmPathEqualsThePagedKernel) {
  ThreadPool pool(2);
  for (const int hd : {24, 72, 64}) {
    const int n_head = 4, n_kv = 2;
    const int64_t len = 150, kw = n_kv * hd, qw = n_head * hd;
    const auto q = test::random_floats(static_cast<size_t>(len * qw), 1, 1.0f);
    const auto k = test::random_floats(static_cast<size_t>(len * kw), 2, 1.0f);
    const auto v = test::random_floats(static_cast<size_t>(len * kw), 3, 1.0f);
    std::vector<int32_t> last(static_cast<size_t>(len), static_cast<int32_t>(len - 1));
    std::vector<float> want(static_cast<size_t>(len * qw)), got(want.size());
    static const int32_t kOneBlock = 0;
    std::vector<const int32_t*> tables(static_cast<size_t>(len), &kOneBlock);
    AttentionShape s{n_head, n_kv, hd};
    s.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    attention_paged(pool, PagedKvLayerView::f32(k.data(), v.data(), kw, kw, static_cast<int>(len)),
                    {len, q.data(), want.data(), last.data(), tables.data()}, s, AttentionKernel::PerRow);
    ASSERT_TRUE(attention_dense_gemm(pool, k.data(), v.data(), kw, kw, len, {len, q.data(), got.data(), last.data(), nullptr}, s))
        << "head size " << hd;
    double worst = 0;
    for (size_t i = 0; i < got.size(); i++) worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
    EXPECT_LT(worst, 2e-5) << "head size " << hd;
  }
}

// The row kernels on every ISA this machine runs: the scores of a block of keys that ends inside the last block of
// 64 (read from rows padded to whole blocks), and the softmax of a row spanning 0 to -300 (the exp's clamp at -80,
// its vectorized floor) against double precision.
TEST(AttentionDense, RowKernelsAgreeWithDoubleOnEveryIsa) {
  for (IsaLevel isa : {IsaLevel::Scalar, IsaLevel::Avx2, IsaLevel::Avx512}) {
    if (isa > best_isa()) continue;
    const DenseRows& rk = dense_rows_kernels(isa);
    SCOPED_TRACE(rk.isa);
    const int hd = 24;
    const int64_t nq = 7, len = 150, ldk = 192;
    const auto q = test::random_floats(static_cast<size_t>(nq * hd), 4, 1.0f);
    auto kt = test::random_floats(static_cast<size_t>(hd * ldk), 5, 1.0f);
    std::vector<float> s(static_cast<size_t>(nq * len), -1.0f);
    rk.scores(q.data(), nq, hd, kt.data(), ldk, len, s.data());
    for (int64_t t = 0; t < nq; t++)
      for (int64_t j = 0; j < len; j++) {
        double want = 0;
        for (int d = 0; d < hd; d++) want += static_cast<double>(q[static_cast<size_t>(t * hd + d)]) * kt[static_cast<size_t>(d * ldk + j)];
        ASSERT_NEAR(s[static_cast<size_t>(t * len + j)], want, 1e-4) << t << " " << j;
      }
    std::vector<float> row(301);
    for (size_t j = 0; j < row.size(); j++) row[j] = -static_cast<float>(j) + (j % 7) * 0.1f;
    std::vector<float> p = row;
    rk.softmax(p.data(), 1, static_cast<int64_t>(p.size()), 1.0f);
    double sum = 0;
    for (float x : row) sum += std::exp(static_cast<double>(x) - row[0]);
    for (size_t j = 0; j < row.size(); j++) {
      const double want = std::exp(static_cast<double>(row[j]) - row[0]) / sum;
      EXPECT_NEAR(p[j], want, 2e-7 * want + 1e-30) << j;
      EXPECT_TRUE(std::isnormal(p[j])) << j << ": no denormals (e^-80 at least)";
    }
  }
}

TEST(AttentionDense, LeavesWindowsSoftcapsFewQueriesAndCausalRowsToThePagedKernel) {
  ThreadPool pool(1);
  const int hd = 16;
  const int64_t len = 80;
  std::vector<float> q(static_cast<size_t>(len * hd), 0.5f), k = q, v = q, out(q.size());
  std::vector<int32_t> last(static_cast<size_t>(len), static_cast<int32_t>(len - 1)), own(static_cast<size_t>(len));
  for (int64_t i = 0; i < len; i++) own[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  AttentionShape s{1, 1, hd};
  EXPECT_TRUE(attention_dense_gemm(pool, k.data(), v.data(), hd, hd, len, {len, q.data(), out.data(), last.data(), nullptr}, s));
  EXPECT_FALSE(attention_dense_gemm(pool, k.data(), v.data(), hd, hd, len, {len, q.data(), out.data(), own.data(), nullptr}, s));
  EXPECT_FALSE(attention_dense_gemm(pool, k.data(), v.data(), hd, hd, len, {32, q.data(), out.data(), last.data(), nullptr}, s));
  AttentionShape w = s;
  w.window = 8;
  EXPECT_FALSE(attention_dense_gemm(pool, k.data(), v.data(), hd, hd, len, {len, q.data(), out.data(), last.data(), nullptr}, w));
  AttentionShape c = s;
  c.softcap = 30.0f;
  EXPECT_FALSE(attention_dense_gemm(pool, k.data(), v.data(), hd, hd, len, {len, q.data(), out.data(), last.data(), nullptr}, c));
}

}  // namespace attention_dense_test
}  // namespace kestrel

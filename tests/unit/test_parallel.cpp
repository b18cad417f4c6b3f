// Tensor parallelism's pieces that need no second process: the --parallel
// spec, a rank's share of a matrix (rows by view, columns by copy), and the
// step message the leader sends (tests/parallel/ runs the ranks for real).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "formats/block_formats.h"
#include "measure/allreduce_bench.h"
#include "measure/profile_report.h"
#include "parallel/expert_combine.h"
#include "parallel/tensor_shard.h"
#include "parallel/parallel_spec.h"
#include "parallel/step/step_message.h"
#include "test_support.h"

using namespace kestrel;
using kestrel::test::QuantMatrix;
using kestrel::test::quantized_matrix;

TEST(ParallelSpec, ParsesKindsAndRefusesWhatIsNotOne) {
  const ParallelSpec s = parse_parallel_spec("tp=4");
  EXPECT_EQ(s.tp, 4);
  EXPECT_EQ(s.ranks(), 4);
  const ParallelSpec m = parse_parallel_spec("tp=2,ep=3,pp=2");
  EXPECT_EQ(m.ranks(), 12);
  EXPECT_EQ(m.describe(), "tp=2,ep=3,pp=2");
  for (const char* bad : {"", "tp", "tp=0", "tp=-1", "tp=2x", "xp=2", "tp=2,tp=2", "tp=2,", "tp=99999"})
    EXPECT_THROW(parse_parallel_spec(bad), Error) << bad;
  try {
    parse_parallel_spec("tq=2");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown kind 'tq'"), std::string::npos) << e.what();
  }
}

// Every rank's columns of a quantized matrix, dequantized, are exactly the
// matching columns of the whole matrix dequantized; the ranks' shares tile it.
TEST(TensorShard, ColumnSharesAreTheMatrixColumnsExactly) {
  for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::F16}) {
    const int64_t rows = 6, cols = 1024;
    QuantMatrix m = quantized_matrix(type, rows, cols, 7);
    std::vector<float> whole(static_cast<size_t>(cols));
    for (int n : {2, 4}) {
      for (int rank = 0; rank < n; rank++) {
        const TensorShard sh{rank, n, nullptr};
        const Weight part = sh.columns(m.w);
        ASSERT_EQ(part.cols(), cols / n);
        ASSERT_EQ(part.rows(), rows);
        std::vector<float> got(static_cast<size_t>(part.cols()));
        for (int64_t r = 0; r < rows; r++) {
          dequantize_row(type, m.w.row(r), whole.data(), cols);
          dequantize_row(type, part.row(r), got.data(), part.cols());
          for (int64_t c = 0; c < part.cols(); c++)
            ASSERT_EQ(got[c], whole[rank * part.cols() + c]) << type_name(type) << " rank " << rank << " row " << r;
        }
      }
    }
  }
}

TEST(TensorShard, RowSharesAreViewsAndUnevenSplitsAreRefusedByName) {
  QuantMatrix m = quantized_matrix(GgmlType::Q8_0, 8, 64, 3);
  const TensorShard sh{1, 2, nullptr};
  const Weight part = sh.rows(m.w);
  EXPECT_EQ(part.rows(), 4);
  EXPECT_EQ(part.data, m.w.row(4));  // no copy: the file's rows
  const TensorShard three{0, 3, nullptr};
  try {
    three.rows(m.w);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("8 rows of blk.0.test.weight do not split evenly"), std::string::npos)
        << e.what();
  }
  // A share that is not whole blocks: Q4_K has 256 values a block.
  QuantMatrix k = quantized_matrix(GgmlType::Q4_K, 2, 256, 3);
  try {
    TensorShard{0, 2, nullptr}.columns(k.w);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not whole Q4_K blocks of 256"), std::string::npos) << e.what();
  }
  EXPECT_EQ(TensorShard{}.part({1, 2, 3, 4}, 0, 4).size(), 4u);
  EXPECT_EQ(TensorShard({1, 2, nullptr}).part({1, 2, 3, 4}, 0, 4), (std::vector<float>{3, 4}));
}

TEST(StepMessage, RoundTripsTheBatchItsPlacementAndCopies) {
  // Two sequences: a prefill of 3 rows of seq 7 (positions 16..18, block
  // size 16: two blocks of its table read) and a decode row of seq 2.
  Batch b;
  b.add(11, 16, 7, false);
  b.add(12, 17, 7, false);
  b.add(13, 18, 7, true);
  b.add(14, 3, 2, true);
  const int32_t table7[] = {5, 9, 99}, table2[] = {4};
  const int32_t sliding7[] = {-1, 3}, sliding2[] = {8};
  BatchPlacement p(4);
  for (int i = 0; i < 4; i++) {
    p.slots[0][i] = b.seq_ids[i] == 7 ? 9 * 16 + b.positions[i] - 16 : 4 * 16 + 3;
    p.tables[0][i] = b.seq_ids[i] == 7 ? table7 : table2;
    p.slots[1][i] = p.slots[0][i] + 1000;
    p.tables[1][i] = b.seq_ids[i] == 7 ? sliding7 : sliding2;
  }
  const std::vector<BlockCopy> copies = {{0, 3, 4}, {1, 6, 2}};
  const auto bytes = encode_step(b, p, 2, 16, copies);
  DecodedStep d;
  decode_step(bytes, d);
  EXPECT_EQ(d.batch.tokens, b.tokens);
  EXPECT_EQ(d.batch.positions, b.positions);
  EXPECT_EQ(d.batch.seq_ids, b.seq_ids);
  EXPECT_EQ(d.batch.want_logits, b.want_logits);
  ASSERT_EQ(d.copies.size(), 2u);
  EXPECT_EQ(d.copies[1].group, 1);
  EXPECT_EQ(d.copies[1].from, 6);
  EXPECT_EQ(d.copies[1].to, 2);
  for (int g = 0; g < 2; g++)
    for (int i = 0; i < 4; i++) {
      EXPECT_EQ(d.place.slots[g][i], p.slots[g][i]);
      const int n_blocks = b.positions[i] / 16 + 1;  // what the row's attention reads
      for (int k = 0; k < n_blocks; k++) EXPECT_EQ(d.place.tables[g][i][k], p.tables[g][i][k]) << g << " " << i;
    }
  // Rows of one sequence share one table.
  EXPECT_EQ(d.place.tables[0][0], d.place.tables[0][2]);

  // Truncated or padded messages are errors, not garbage steps.
  auto cut = bytes;
  cut.pop_back();
  EXPECT_THROW(decode_step(cut, d), Error);
  auto longer = bytes;
  longer.push_back(0);
  EXPECT_THROW(decode_step(longer, d), Error);
}

// profile-report's communication summary: transfers in flight on their own
// track stay out of the operator table; what the rank waited for is exposed.
TEST(ProfileReport, OverlappedFractionIsTheShareOfTransferTimeNotWaitedFor) {
  std::vector<ProfileEvent> ev = {
      {"matmul attn_q", 0, 0, 1000, 0, 0, ""},
      {"all-reduce", -1, 100, 400, 8192, 0, "communication"},
      {"all-reduce", -1, 600, 400, 8192, 0, "communication"},
      {"wait all-reduce", -1, 900, 100, 8192, 0, ""},       // 100 of the 800 ns waited for
      {"all-reduce (blocking)", -1, 1100, 0, 8192, 0, ""},  // (a zero-length blocking one)
  };
  const ProfileSummary s = summarize_profile(ev);
  EXPECT_EQ(s.transfers, 2);
  EXPECT_DOUBLE_EQ(s.in_flight_ns, 800);
  EXPECT_DOUBLE_EQ(s.exposed_ns, 100);
  EXPECT_DOUBLE_EQ(s.overlapped_fraction(), 1.0 - 100.0 / 800.0);
  EXPECT_DOUBLE_EQ(s.total_ns, 1100);  // the operators and the wait, not the transfers
  for (const auto& o : s.ops) EXPECT_NE(o.op, "all-reduce");
  EXPECT_NE(render_communication(s).find("overlapped fraction 87.5%"), std::string::npos) << render_communication(s);
  EXPECT_EQ(render_communication(summarize_profile({ev[0]})), "");
}

TEST(AllReduceBench, FitRecoversALineAndTheRingModelCountsHopsAndBytes) {
  std::vector<AllReducePoint> p;
  for (int64_t b : {8192, 65536, 524288}) p.push_back({b / 8192, b, 7.0 + 0.25e-3 * static_cast<double>(b)});
  const AlphaBeta f = fit_alpha_beta(p);
  EXPECT_NEAR(f.alpha_us, 7.0, 1e-9);
  EXPECT_NEAR(f.beta_us_per_byte, 0.25e-3, 1e-12);
  EXPECT_NEAR(f.r2, 1.0, 1e-12);
  EXPECT_THROW(fit_alpha_beta({p[0]}), Error);
  EXPECT_THROW(fit_alpha_beta({p[0], p[0]}), Error);
  // 4 hosts: 6 hops of 10 µs; each link carries 6/4 of 1 MB at 100 Gb/s (12500 bytes/µs).
  EXPECT_NEAR(ring_all_reduce_us(1e6, 4, 100, 10), 60 + 1.5 * 1e6 / 12500, 1e-9);
  EXPECT_EQ(ring_all_reduce_us(1e6, 1, 100, 10), 0);
}

// The all-to-all expert sum, its ranks simulated in one process: each rank's
// packed rows routed to their owners by hand, each owner's sum, the owners'
// runs put together (the all-gather) — the same floats as summing the ranks'
// whole partial outputs in rank order, whatever rows each rank computed,
// including fewer rows than ranks.
TEST(ExpertCombine, PackedRowsSummedByTheirOwnersEqualTheWholeSum) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (const auto& [ranks, n] : {std::pair{2, 7}, std::pair{3, 10}, std::pair{4, 2}, std::pair{3, 1}}) {
    const int64_t dim = 5;
    std::vector<std::vector<float>> x(ranks, std::vector<float>(n * dim, 0.0f));
    std::vector<std::vector<uint8_t>> touched(ranks, std::vector<uint8_t>(n, 0));
    for (int r = 0; r < ranks; r++)
      for (int64_t t = 0; t < n; t++)
        if (rng() % 3 != 0) {  // untouched rows stay zero, as an expert group's are
          touched[r][t] = 1;
          for (int64_t d = 0; d < dim; d++) x[r][t * dim + d] = value(rng);
        }
    std::vector<float> want(n * dim, 0.0f);
    for (int r = 0; r < ranks; r++)
      for (int64_t i = 0; i < n * dim; i++) want[i] += x[r][i];

    std::vector<std::vector<float>> send(ranks);
    std::vector<std::vector<int64_t>> to_each(ranks);
    for (int r = 0; r < ranks; r++) pack_partials(x[r].data(), n, dim, touched[r].data(), r, ranks, send[r], to_each[r]);
    std::vector<float> got(n * dim, -99.0f), scratch;
    int64_t sent_rows = 0;
    for (int o = 0; o < ranks; o++) {
      EXPECT_EQ(to_each[o][o], 0) << "a rank sends itself nothing";
      std::vector<float> recv;
      std::vector<int64_t> from_each(ranks, 0);
      for (int r = 0; r < ranks; r++) {
        int64_t at = 0;
        for (int k = 0; k < o; k++) at += to_each[r][k];
        recv.insert(recv.end(), send[r].begin() + at, send[r].begin() + at + to_each[r][o]);
        from_each[r] = to_each[r][o];
        sent_rows += to_each[r][o] / (dim + 1);
      }
      sum_owned(x[o].data(), n, dim, o, ranks, recv.data(), from_each.data(), scratch);
      for (int64_t i = owned_first(n, ranks, o) * dim; i < owned_first(n, ranks, o + 1) * dim; i++) got[i] = x[o][i];
    }
    EXPECT_EQ(got, want) << ranks << " ranks, " << n << " rows";
    int64_t expected_rows = 0;  // touched rows another rank owns: only those travel
    for (int r = 0; r < ranks; r++)
      for (int64_t t = 0; t < n; t++)
        expected_rows += touched[r][t] && !(t >= owned_first(n, ranks, r) && t < owned_first(n, ranks, r + 1));
    EXPECT_EQ(sent_rows, expected_rows);
  }
}

TEST(ExpertCombine, ARowOutsideTheOwnersRunIsAnErrorNotASum) {
  const int64_t dim = 2, n = 4;
  std::vector<float> x(n * dim, 0.0f), scratch;
  // Rank 1 of 2 owns rows 2..3; rank 0 "sends" row 1.
  const int32_t t = 1;
  float tag;
  std::memcpy(&tag, &t, sizeof tag);
  const std::vector<float> recv = {tag, 1.0f, 2.0f};
  const int64_t from_each[2] = {3, 0};
  EXPECT_THROW(sum_owned(x.data(), n, dim, 1, 2, recv.data(), from_each, scratch), Error);
  const int64_t ragged[2] = {2, 0};
  EXPECT_THROW(sum_owned(x.data(), n, dim, 1, 2, recv.data(), ragged, scratch), Error);
  EXPECT_EQ(parse_expert_sum("all-to-all"), ExpertSum::AllToAll);
  EXPECT_THROW(parse_expert_sum("alltoall"), Error);
}

// Which sums go by all-to-all: only under ep; always when asked; on auto,
// blocking sums of 64 KiB and more (overlapped ones stay on the all-reduce).
TEST(ExpertCombine, AutoChoosesAllToAllForLargeBlockingSumsOnly) {
  TensorShard s;
  s.expert_sum = ExpertSum::AllToAll;
  EXPECT_FALSE(s.combines(1024, 2048, false)) << "no ep: nothing to combine";
  s.ep = 2;
  EXPECT_TRUE(s.combines(1, 64, true));
  s.expert_sum = ExpertSum::Auto;
  EXPECT_FALSE(s.combines(7, 2048, false)) << "56 KiB";
  EXPECT_TRUE(s.combines(8, 2048, false)) << "64 KiB";
  EXPECT_FALSE(s.combines(64, 2048, true)) << "overlapped";
  s.expert_sum = ExpertSum::AllReduce;
  EXPECT_FALSE(s.combines(64, 2048, false));
}

// Ranks are laid out stage-major, then expert group, then place in the
// tensor-parallel group: a rank's counterpart in another stage keeps its
// group and place.
TEST(TensorShard, CounterpartsInOtherStagesKeepGroupAndPlace) {
  TensorShard s;
  s.n = 2, s.rank = 1, s.ep = 2, s.ep_rank = 1, s.stages = 3, s.stage = 1;
  EXPECT_EQ(s.rank_in_stage(1), 7);  // this rank: (1 * 2 + 1) * 2 + 1
  EXPECT_EQ(s.rank_in_stage(0), 3);
  EXPECT_EQ(s.rank_in_stage(2), 11);
  s.ep = 1, s.ep_rank = 0;
  EXPECT_EQ(s.rank_in_stage(2), 5);  // tp x pp only: stage * n + rank, as before
}

#pragma once
// Tensor parallelism (Megatron-style) as the model layer sees it: this
// rank's share of each split dimension and of each matrix, and the sum that
// joins the ranks' partial results. With n == 1 every call is the identity,
// so the single-process model is the same code.
//
// Column-parallel matrices (q, k, v by heads; gate, up by FFN rows) keep a
// contiguous run of rows: a view into the mapped file. Row-parallel ones
// (attention output, down) keep a run of columns: copied, whole blocks. Each
// rank's partial output of a row-parallel matrix is summed across ranks.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "formats/weight.h"
#include "parallel/expert_combine.h"

namespace kestrel {

// With expert parallelism as well (ep groups of tp ranks each), the tensor
// split is within a group, and each group holds a contiguous run of the
// experts (each of them split over the group's ranks): an MoE layer's output
// is then a partial sum over every rank (of its pipeline stage), attention's
// and a dense FFN's over the group only.
struct TensorShard {
  int rank = 0;                  // within the tensor-parallel group
  int n = 1;                     // ranks of that group
  Communicator* comm = nullptr;  // the group (set when n > 1)
  int ep_rank = 0;               // which expert group this rank is in
  int ep = 1;                    // expert groups
  Communicator* world = nullptr; // every rank (set when n * ep * stages > 1)
  // Pipeline parallelism: this rank runs a contiguous range of the layers
  // (stage s is ranks s * ep * n .. (s + 1) * ep * n - 1, its expert groups
  // in order; stage 0 embeds, rank 0 samples).
  int stage = 0;
  int stages = 1;
  // With both pp and ep: the ranks of this stage (an MoE layer's sum is over
  // them); null: the same as world.
  Communicator* stage_comm = nullptr;
  // Split a step's rows in two and sum one half while the other computes.
  bool overlap = true;
  // How an MoE layer's output is summed over the ranks under ep.
  ExpertSum expert_sum = ExpertSum::Auto;

  bool split() const { return n > 1; }
  bool experts_split() const { return ep > 1; }
  bool pipelined() const { return stages > 1; }
  // Whether this rank talks to others at all (any split).
  bool distributed() const { return split() || experts_split() || pipelined(); }
  // Rank 0 of the job: the one that holds the output head and samples.
  bool leader() const { return rank == 0 && ep_rank == 0 && stage == 0; }
  // The layers [first, end) of n_layer this stage runs: as even as they
  // come, the earlier stages taking one more when they do not divide.
  int first_layer(int n_layer) const { return stage_start(stage, n_layer); }
  int end_layer(int n_layer) const { return stage_start(stage + 1, n_layer); }
  int stage_start(int s, int n_layer) const { return s * (n_layer / stages) + std::min(s, n_layer % stages); }
  // Who sums an MoE layer's output: every rank of the stage.
  Communicator* experts_comm() const { return stage_comm ? stage_comm : world; }
  // This rank's counterpart (same expert group, same place in it) in stage s.
  int rank_in_stage(int s) const { return (s * ep + ep_rank) * n + rank; }
  // Whether this rank's group holds expert e of n_expert.
  bool holds_expert(int e, int n_expert) const {
    const int each = n_expert / ep;
    return e / each == ep_rank;
  }
  // Shared (always-on) experts run in expert group 0 only: their partial sums go into the all-rank sum once.
  bool holds_shared_expert() const { return ep_rank == 0; }
  // This rank's count of `total` items (heads, FFN rows); Error naming
  // `what` when they do not divide evenly.
  int64_t share(int64_t total, const std::string& what) const;
  // Rows [first, first + count) of w split n ways: this rank's run.
  Weight rows(const Weight& w, int64_t first, int64_t count) const;
  Weight rows(const Weight& w) const { return rows(w, 0, w.rows()); }
  // All columns of w split n ways: this rank's run (a copy).
  Weight columns(const Weight& w) const;
  // Elements [first, first + count) of v split n ways (biases).
  std::vector<float> part(const std::vector<float>& v, int64_t first, int64_t count) const;
  // x[0, count) summed over the ranks that hold parts of it: the partial
  // results of a row-parallel matrix over the group, an MoE layer's output
  // (experts) over every rank, the expert groups' too.
  void sum(float* x, int64_t count, bool experts = false) const {
    if (Communicator* c = summed_over(experts)) c->all_reduce_sum(x, count);
  }
  // Whether an MoE layer's sums may go through ExpertCombine, and whether
  // the sum of `rows` rows of dim does (the same choice on every rank; auto's
  // rule is ExpertSum's).
  bool combines_experts() const { return experts_split() && expert_sum != ExpertSum::AllReduce; }
  bool combines(int64_t rows, int64_t dim, bool overlapped) const {
    if (!combines_experts()) return false;
    if (expert_sum == ExpertSum::AllToAll) return true;
    return !overlapped && rows * dim * static_cast<int64_t>(sizeof(float)) >= kAutoAllToAllBytes;
  }
  // The same sum started non-blocking (overlap): finish() waits for it.
  struct PendingSum {
    Communicator* comm = nullptr;  // null: nothing in flight
    Communicator::Request req = 0;
    ExpertCombine* combine = nullptr;  // or this exchange
  };
  PendingSum start_sum(float* x, int64_t count, bool experts) const {
    Communicator* c = summed_over(experts);
    return c ? PendingSum{c, c->start_all_reduce_sum(x, count)} : PendingSum{};
  }
  static PendingSum start_sum(ExpertCombine& combine, float* x, int64_t rows, const uint8_t* touched) {
    combine.start(x, rows, touched);
    return PendingSum{nullptr, 0, &combine};
  }
  // An FFN's output (rows of dim) summed: an MoE layer's through combine
  // when given and chosen (touched: the rows this rank computed), else as
  // sum() does; started while the other half computes, or at once.
  PendingSum start_ffn_sum(float* y, int64_t rows, int64_t dim, bool moe, ExpertCombine* combine,
                           const uint8_t* touched) const {
    return moe && combine && combines(rows, dim, true) ? start_sum(*combine, y, rows, touched) : start_sum(y, rows * dim, moe);
  }
  void sum_ffn(float* y, int64_t rows, int64_t dim, bool moe, ExpertCombine* combine, const uint8_t* touched) const {
    if (!(moe && combine && combines(rows, dim, false))) return sum(y, rows * dim, moe);
    PendingSum p = start_sum(*combine, y, rows, touched);
    finish(p);
  }
  static void finish(PendingSum& p) {
    if (p.comm) p.comm->wait(p.req);
    if (p.combine) p.combine->finish();
    p.comm = nullptr;
    p.combine = nullptr;
  }
  void progress() const {
    if (split()) comm->progress();
    if (world && world != comm) world->progress();
  }

 private:
  // Who holds parts of a sum (null: this rank holds all of it).
  Communicator* summed_over(bool experts) const {
    return experts && experts_split() ? experts_comm() : split() ? comm : nullptr;
  }
};

}  // namespace kestrel

#pragma once
// An MoE layer's output summed over every rank under expert parallelism by
// moving only the rows a rank computed, instead of an all-reduce of every
// row. A rank's partial output is non-zero only for the tokens routed to one
// of its experts (and everywhere in the group that runs the shared expert);
// with many experts and few per token most of a rank's rows are zero.
//
// Each rank owns a contiguous run of the rows. All-to-all: every rank sends
// the non-zero rows in each owner's run to that owner (each prefixed by its
// row index); the owner sums its run over the ranks, in rank order (so the
// result does not depend on who owns what); all-gather: every owner's run to
// every rank. Bytes a rank sends: its non-zero rows outside its run, plus
// its run to each other rank, against an all-reduce's whole buffer twice
// over (a ring's reduce-scatter and all-gather) — fewer when a rank's rows
// are mostly zero; but three rounds of latency (counts, rows, all-gather)
// instead of one.
#include <cstdint>
#include <string>
#include <vector>

#include "core/communicator.h"

namespace kestrel {

// How an MoE layer's partial outputs are summed over the ranks. Auto: by
// all-to-all for a blocking sum of kAutoAllToAllBytes and more, by
// all-reduce below (its one round of latency wins there) and for a sum that
// overlaps the other half's compute (there the two measured the same within
// the noise of the ranks' uneven expert work, and one collective is the
// simpler path). Measured in docs/parallel.md.
enum class ExpertSum { Auto, AllReduce, AllToAll };
inline constexpr int64_t kAutoAllToAllBytes = 64 * 1024;
// "auto" / "all-reduce" / "all-to-all"; Error naming the accepted values.
ExpertSum parse_expert_sum(const std::string& text);

// The first of the n rows rank o of `ranks` owns (runs as even as they come).
inline int64_t owned_first(int64_t n, int ranks, int o) { return n * o / ranks; }

// The pure halves, apart so that they can be tested without a communicator.
// pack_partials: rows t of x[n][dim] with touched[t] != 0 that another rank
// owns, in row order, as [t's bits as an int32 in a float][dim floats],
// grouped by owner: to_each[o] floats for rank o (none for self).
void pack_partials(const float* x, int64_t n, int64_t dim, const uint8_t* touched, int self, int ranks,
                   std::vector<float>& send, std::vector<int64_t>& to_each);
// sum_owned: self's run of x = the sum in rank order of every rank's rows:
// x's own for self, recv's (from_each[r] floats from rank r, in rank order,
// as packed above) for the others, rows a rank did not send being zero.
void sum_owned(float* x, int64_t n, int64_t dim, int self, int ranks, const float* recv, const int64_t* from_each,
               std::vector<float>& scratch);

// The exchange, with its buffers allocated once for the largest step.
class ExpertCombine {
 public:
  // Collective over world (it splits off a communicator of its own: its
  // transfers chain by themselves as they complete, which may interleave
  // differently with other collectives on each rank).
  ExpertCombine(Communicator& world, int64_t dim, int64_t max_rows);
  // Starts summing x[n][dim] over the ranks: packs and sends the rows (x is
  // read now; touched need not outlive the call), the transfer then in
  // flight while the caller computes. x must stay untouched until finish().
  void start(float* x, int64_t n, const uint8_t* touched);
  // Moves a started exchange along: its rows go out once the counts are in;
  // once the others' rows are in, this rank sums its run and starts the
  // all-gather (so that all of it can hide behind compute).
  void progress();
  // Completes what progress() has not: x is then the sum over the ranks,
  // on every rank.
  void finish();

 private:
  std::shared_ptr<Communicator> comm_;
  int64_t dim_;
  std::vector<float> send_, recv_, scratch_;
  std::vector<int64_t> to_each_, from_each_, gather_counts_;
  enum class State { Idle, Rows, Gather };  // what is in flight
  State state_ = State::Idle;
  float* x_ = nullptr;
  int64_t n_ = 0;
  Communicator::Request req_ = 0;
  // The others' rows are in: sum this rank's run, start the all-gather.
  void sum_and_gather();
};

}  // namespace kestrel

#pragma once
// The all-reduce a split model makes twice a layer, measured at the sizes a
// step sends (one layer's activations for 1..64 rows) and fitted to
// T(S) = alpha + beta * S; with it, a model's communication per decode step
// and a prediction for hosts joined by a given network (ring all-reduce).
#include <cstdint>
#include <vector>

#include "core/communicator.h"

namespace kestrel {

struct AllReducePoint {
  int64_t rows = 0;
  int64_t bytes = 0;
  double median_us = 0;
};

// Every rank calls it; `reps` timed sums per size (after a few untimed),
// the median kept. Returns this rank's medians.
std::vector<AllReducePoint> measure_all_reduce(Communicator& comm, int64_t dim, const std::vector<int64_t>& rows,
                                               int reps);

// An MoE layer's output summed by all-to-all (ExpertCombine) instead: each
// rank has computed a `touched` fraction of the rows (random, seeded by its
// rank), sends those to their owners, then the all-gather. Every rank calls
// it; this rank's median µs per size.
std::vector<AllReducePoint> measure_expert_all_to_all(Communicator& comm, int64_t dim, const std::vector<int64_t>& rows,
                                                      double touched, int reps);

// Bytes one rank sends to sum `bytes` of partial outputs over `ranks`: a ring
// all-reduce (reduce-scatter then all-gather) against the all-to-all, whose
// rows go out only where the rank computed them (fraction touched, each
// carrying a 4-byte index per dim floats) before its own run is gathered.
double ring_all_reduce_bytes_sent(double bytes, int ranks);
double expert_all_to_all_bytes_sent(double bytes, int ranks, double touched, int64_t dim);

// The fraction of a step's rows an expert group computes when tokens pick
// n_used of n_expert experts uniformly and the group holds n_expert / groups
// of them (routed experts only: with a shared expert, group 0 computes
// every row whatever this says).
double expected_touched_fraction(int n_expert, int n_used, int groups);

struct AlphaBeta {
  double alpha_us = 0;         // per call
  double beta_us_per_byte = 0;
  double r2 = 0;               // of the fit
  double us(double bytes) const { return alpha_us + beta_us_per_byte * bytes; }
};
// Least squares over the points; Error with fewer than two sizes.
AlphaBeta fit_alpha_beta(const std::vector<AllReducePoint>& points);

// A ring all-reduce of `bytes` over `hosts` hosts joined at link_gbps
// (gigabits per second) with latency_us per hop: 2 (N - 1) hops, each link
// carrying 2 (N - 1) / N of the bytes.
double ring_all_reduce_us(double bytes, int hosts, double link_gbps, double latency_us);

}  // namespace kestrel

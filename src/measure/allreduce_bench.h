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

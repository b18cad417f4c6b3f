#include "measure/allreduce_bench.h"

#include <fmt/format.h>

#include <chrono>

#include "core/error.h"
#include "core/median.h"

namespace kestrel {

std::vector<AllReducePoint> measure_all_reduce(Communicator& comm, int64_t dim, const std::vector<int64_t>& rows,
                                               int reps) {
  if (dim <= 0 || reps <= 0) throw Error("all-reduce bench: the width and the repetitions must be positive");
  std::vector<AllReducePoint> out;
  for (int64_t r : rows) {
    if (r <= 0) throw Error(fmt::format("all-reduce bench: {} rows", r));
    std::vector<float> x(static_cast<size_t>(r * dim), 1.0f);
    for (int i = 0; i < 5; i++) comm.all_reduce_sum(x.data(), r * dim);  // connections, caches
    std::vector<double> us;
    for (int i = 0; i < reps; i++) {
      const auto t0 = std::chrono::steady_clock::now();
      comm.all_reduce_sum(x.data(), r * dim);
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      std::fill(x.begin(), x.end(), 1.0f);  // keep the sums finite
    }
    out.push_back({r, r * dim * static_cast<int64_t>(sizeof(float)), median(us)});
  }
  return out;
}

AlphaBeta fit_alpha_beta(const std::vector<AllReducePoint>& p) {
  if (p.size() < 2) throw Error("all-reduce bench: fitting alpha and beta needs at least two sizes");
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  const double n = static_cast<double>(p.size());
  for (const auto& q : p) {
    const double x = static_cast<double>(q.bytes), y = q.median_us;
    sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  const double den = n * sxx - sx * sx;
  if (den <= 0) throw Error("all-reduce bench: fitting needs at least two different sizes");
  AlphaBeta f;
  f.beta_us_per_byte = (n * sxy - sx * sy) / den;
  f.alpha_us = (sy - f.beta_us_per_byte * sx) / n;
  double ss_res = 0, ss_tot = 0;
  for (const auto& q : p) {
    const double e = q.median_us - f.us(static_cast<double>(q.bytes)), d = q.median_us - sy / n;
    ss_res += e * e, ss_tot += d * d;
  }
  f.r2 = ss_tot > 0 ? 1.0 - ss_res / ss_tot : 1.0;
  return f;
}

double ring_all_reduce_us(double bytes, int hosts, double link_gbps, double latency_us) {
  if (hosts < 2) return 0;
  const double hops = 2.0 * (hosts - 1);
  const double link_bytes_per_us = link_gbps * 1e9 / 8 / 1e6;
  return hops * latency_us + hops / hosts * bytes / link_bytes_per_us;
}

}  // namespace kestrel

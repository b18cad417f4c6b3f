#include "measure/allreduce_bench.h"

#include <fmt/format.h>

#include <chrono>
#include <random>

#include "core/error.h"
#include "core/median.h"
#include "parallel/expert_combine.h"

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

std::vector<AllReducePoint> measure_expert_all_to_all(Communicator& comm, int64_t dim, const std::vector<int64_t>& rows,
                                                      double touched, int reps) {
  if (dim <= 0 || reps <= 0) throw Error("all-to-all bench: the width and the repetitions must be positive");
  if (!(touched >= 0 && touched <= 1)) throw Error(fmt::format("all-to-all bench: touched fraction {} not in [0, 1]", touched));
  std::vector<AllReducePoint> out;
  std::mt19937 rng(static_cast<unsigned>(1234 + comm.rank()));
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int64_t r : rows) {
    if (r <= 0) throw Error(fmt::format("all-to-all bench: {} rows", r));
    std::vector<float> x(static_cast<size_t>(r * dim));
    std::vector<uint8_t> mask(static_cast<size_t>(r));
    ExpertCombine combine(comm, dim, r);
    auto once = [&] {
      for (auto& m : mask) m = u(rng) < touched;
      for (int64_t t = 0; t < r; t++) std::fill(x.begin() + t * dim, x.begin() + (t + 1) * dim, mask[static_cast<size_t>(t)] ? 1.0f : 0.0f);
      const auto t0 = std::chrono::steady_clock::now();
      combine.start(x.data(), r, mask.data());
      combine.finish();
      return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    };
    for (int i = 0; i < 5; i++) once();
    std::vector<double> us;
    for (int i = 0; i < reps; i++) us.push_back(once());
    out.push_back({r, r * dim * static_cast<int64_t>(sizeof(float)), median(us)});
  }
  return out;
}

double ring_all_reduce_bytes_sent(double bytes, int ranks) { return ranks < 2 ? 0 : 2.0 * (ranks - 1) / ranks * bytes; }

double expert_all_to_all_bytes_sent(double bytes, int ranks, double touched, int64_t dim) {
  if (ranks < 2) return 0;
  const double others = static_cast<double>(ranks - 1) / ranks;
  return touched * others * bytes * (1.0 + 1.0 / static_cast<double>(dim)) + others * bytes;
}

double expected_touched_fraction(int n_expert, int n_used, int groups) {
  if (n_expert <= 0 || groups <= 0 || n_used <= 0) return 1;
  // P(no pick in the group) = C(E - E/g, k) / C(E, k), as a product.
  const int outside = n_expert - n_expert / groups;
  double none = 1;
  for (int i = 0; i < n_used; i++) none *= static_cast<double>(outside - i) / (n_expert - i);
  return 1 - std::max(0.0, none);
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

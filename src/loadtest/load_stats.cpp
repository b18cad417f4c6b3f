#include "loadtest/load_stats.h"

#include <algorithm>
#include <cmath>

namespace kestrel {

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = q / 100.0 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  p.n = static_cast<int64_t>(v.size());
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  p.mean = sum / static_cast<double>(v.size());
  p.median = percentile(v, 50);
  p.p90 = percentile(v, 90);
  p.p95 = percentile(v, 95);
  p.p99 = percentile(v, 99);
  p.p999 = percentile(v, 99.9);
  return p;
}

double tpot_s(const RequestRecord& r) {
  if (!r.ok || r.output_tokens < 2 || r.ttft_s < 0) return -1;
  return (r.e2e_s - r.ttft_s) / static_cast<double>(r.output_tokens - 1);
}

LoadSummary summarize(const std::vector<RequestRecord>& records, double duration_s, const Slo& slo) {
  LoadSummary s;
  s.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, e2e;
  for (const auto& r : records) {
    if (!r.ok) {
      s.failed++;
      s.errors[r.error]++;
      continue;
    }
    s.completed++;
    s.prompt_tokens += r.prompt_tokens;
    s.output_tokens += r.output_tokens;
    if (r.ttft_s >= 0) ttft.push_back(r.ttft_s * 1000);
    e2e.push_back(r.e2e_s * 1000);
    const double t = tpot_s(r);
    if (t >= 0) tpot.push_back(t * 1000);
    for (double g : r.itl_s) itl.push_back(g * 1000);
    const bool met = (slo.ttft_ms <= 0 || (r.ttft_s >= 0 && r.ttft_s * 1000 <= slo.ttft_ms)) &&
                     (slo.tpot_ms <= 0 || t < 0 || t * 1000 <= slo.tpot_ms) &&
                     (slo.e2e_ms <= 0 || r.e2e_s * 1000 <= slo.e2e_ms);
    s.slo_met += met;
  }
  s.ttft_ms = percentiles(ttft);
  s.tpot_ms = percentiles(tpot);
  s.itl_ms = percentiles(itl);
  s.e2e_ms = percentiles(e2e);
  if (duration_s > 0) {
    s.request_throughput = static_cast<double>(s.completed) / duration_s;
    s.output_throughput = static_cast<double>(s.output_tokens) / duration_s;
    s.total_throughput = static_cast<double>(s.prompt_tokens + s.output_tokens) / duration_s;
    s.goodput = static_cast<double>(s.slo_met) / duration_s;
  }
  return s;
}

}  // namespace kestrel

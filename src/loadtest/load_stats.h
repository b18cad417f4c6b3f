#pragma once
// What a load test measured, and its arithmetic: one record per request
// (client-side times of its streamed chunks), percentiles, throughput and
// goodput. Pure functions, tested on timelines with known answers.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kestrel {

struct RequestRecord {
  int64_t index = 0;
  int priority = 0;
  bool ok = false;
  std::string error;  // kind when !ok: "http 4xx", "http 5xx", "connection", "timeout", "stream"
  std::string error_detail;
  double start_s = 0;         // sent, seconds since the test began
  double ttft_s = -1;         // first content chunk, seconds after start
  double e2e_s = -1;          // last byte, seconds after start
  std::vector<double> itl_s;  // gaps between consecutive content chunks
  int64_t prompt_tokens = 0;  // from usage (0: not reported)
  int64_t output_tokens = 0;  // from usage, else the content chunks counted
  bool usage_reported = false;
  int64_t cached_tokens = 0;  // prompt tokens the server's prefix cache served (usage.prompt_tokens_details)
  std::string text;           // the reply's content
};

struct Percentiles {
  int64_t n = 0;
  double mean = 0, median = 0, p90 = 0, p95 = 0, p99 = 0, p999 = 0;
};
// Linear interpolation between closest ranks (numpy's default); n 0: all zero.
Percentiles percentiles(std::vector<double> values);
double percentile(std::vector<double> values, double q);  // q in [0, 100]

struct Slo {
  double ttft_ms = 0, tpot_ms = 0, e2e_ms = 0;  // 0: no bound
  bool any() const { return ttft_ms > 0 || tpot_ms > 0 || e2e_ms > 0; }
};

struct LoadSummary {
  int64_t completed = 0, failed = 0;
  std::map<std::string, int64_t> errors;  // kind -> count
  double duration_s = 0;
  double request_throughput = 0, output_throughput = 0, total_throughput = 0;  // per second
  int64_t prompt_tokens = 0, output_tokens = 0;
  Percentiles ttft_ms, tpot_ms, itl_ms, e2e_ms;
  double goodput = 0;  // completed requests meeting the SLO, per second
  int64_t slo_met = 0;
};

// TPOT of one request: (e2e - ttft) / (output tokens - 1); -1 with fewer than 2 tokens.
double tpot_s(const RequestRecord& r);
LoadSummary summarize(const std::vector<RequestRecord>& records, double duration_s, const Slo& slo = {});

}  // namespace kestrel

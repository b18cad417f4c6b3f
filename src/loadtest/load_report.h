#pragma once
// Load test results for people and for machines: a summary table in the
// style of `vllm bench serve`, a Markdown table, a JSON document with every
// request's record, and for sweeps an SVG of latency percentiles against load.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loadtest/load_stats.h"

namespace kestrel {

std::string render_summary(const LoadSummary& s, const std::string& title, const Slo& slo);
nlohmann::json summary_json(const LoadSummary& s);
nlohmann::json record_json(const RequestRecord& r);

struct SweepPoint {
  std::string load;  // "c=8" or "4 req/s"
  double load_value = 0;
  LoadSummary summary;
};
std::string render_markdown(const std::vector<SweepPoint>& points);
// Heatmap of load x percentile (E2E and TTFT), and TTFT/ITL P99 against load.
std::string render_sweep_svg(const std::vector<SweepPoint>& points, const std::string& title);

}  // namespace kestrel

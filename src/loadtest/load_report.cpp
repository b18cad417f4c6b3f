#include "loadtest/load_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kestrel {

using json = nlohmann::json;

namespace {

json pct_json(const Percentiles& p) {
  return {{"n", p.n},     {"mean", p.mean}, {"median", p.median}, {"p90", p.p90},
          {"p95", p.p95}, {"p99", p.p99},   {"p99.9", p.p999}};
}

std::string line(const std::string& k, const std::string& v) { return fmt::format("{:<40}{:>12}\n", k, v); }

std::string section(const std::string& name, const std::string& unit, const Percentiles& p) {
  std::string out = fmt::format("{:-^52}\n", name);
  out += line(fmt::format("Mean {} (ms):", unit), fmt::format("{:.2f}", p.mean));
  out += line(fmt::format("Median {} (ms):", unit), fmt::format("{:.2f}", p.median));
  out += line(fmt::format("P90 {} (ms):", unit), fmt::format("{:.2f}", p.p90));
  out += line(fmt::format("P95 {} (ms):", unit), fmt::format("{:.2f}", p.p95));
  out += line(fmt::format("P99 {} (ms):", unit), fmt::format("{:.2f}", p.p99));
  out += line(fmt::format("P99.9 {} (ms):", unit), fmt::format("{:.2f}", p.p999));
  return out;
}

}  // namespace

std::string render_summary(const LoadSummary& s, const std::string& title, const Slo& slo) {
  std::string out = fmt::format("{:=^52}\n", " " + title + " ");
  out += line("Successful requests:", fmt::format("{}", s.completed));
  out += line("Failed requests:", fmt::format("{}", s.failed));
  for (const auto& [kind, n] : s.errors) out += line(fmt::format("  {}:", kind), fmt::format("{}", n));
  out += line("Benchmark duration (s):", fmt::format("{:.2f}", s.duration_s));
  out += line("Total input tokens:", fmt::format("{}", s.prompt_tokens));
  out += line("Total generated tokens:", fmt::format("{}", s.output_tokens));
  out += line("Request throughput (req/s):", fmt::format("{:.2f}", s.request_throughput));
  out += line("Output token throughput (tok/s):", fmt::format("{:.2f}", s.output_throughput));
  out += line("Total token throughput (tok/s):", fmt::format("{:.2f}", s.total_throughput));
  if (slo.any())
    out += line("Goodput (req/s within the SLO):", fmt::format("{:.2f} ({} of {})", s.goodput, s.slo_met, s.completed));
  out += section(" Time to First Token ", "TTFT", s.ttft_ms);
  out += section(" Time per Output Token (excl. 1st) ", "TPOT", s.tpot_ms);
  out += section(" Inter-token Latency ", "ITL", s.itl_ms);
  out += section(" End-to-end Latency ", "E2E", s.e2e_ms);
  out += fmt::format("{:=^52}\n", "");
  return out;
}

json summary_json(const LoadSummary& s) {
  return {{"completed", s.completed},
          {"failed", s.failed},
          {"errors", s.errors},
          {"duration_s", s.duration_s},
          {"request_throughput", s.request_throughput},
          {"output_throughput", s.output_throughput},
          {"total_token_throughput", s.total_throughput},
          {"total_input_tokens", s.prompt_tokens},
          {"total_output_tokens", s.output_tokens},
          {"goodput", s.goodput},
          {"slo_met", s.slo_met},
          {"ttft_ms", pct_json(s.ttft_ms)},
          {"tpot_ms", pct_json(s.tpot_ms)},
          {"itl_ms", pct_json(s.itl_ms)},
          {"e2e_ms", pct_json(s.e2e_ms)}};
}

json record_json(const RequestRecord& r) {
  json j = {{"index", r.index},
            {"priority", r.priority},
            {"ok", r.ok},
            {"start_s", r.start_s},
            {"ttft_s", r.ttft_s},
            {"e2e_s", r.e2e_s},
            {"itl_s", r.itl_s},
            {"prompt_tokens", r.prompt_tokens},
            {"output_tokens", r.output_tokens},
            {"usage_reported", r.usage_reported}};
  if (!r.ok) j["error"] = r.error, j["error_detail"] = r.error_detail;
  return j;
}

std::string render_markdown(const std::vector<SweepPoint>& points) {
  std::string out =
      "| load | req/s | out tok/s | TTFT p50 / p99 (ms) | TPOT p50 / p99 (ms) | ITL p50 / p99 (ms) | E2E p50 / p99 "
      "(ms) | failed |\n"
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  for (const auto& p : points) {
    const auto& s = p.summary;
    out += fmt::format(
        "| {} | {:.2f} | {:.1f} | {:.1f} / {:.1f} | {:.2f} / {:.2f} | {:.2f} / {:.2f} | {:.0f} / {:.0f} | {} |\n",
        p.load, s.request_throughput, s.output_throughput, s.ttft_ms.median, s.ttft_ms.p99, s.tpot_ms.median,
        s.tpot_ms.p99, s.itl_ms.median, s.itl_ms.p99, s.e2e_ms.median, s.e2e_ms.p99, s.failed);
  }
  return out;
}

std::string render_sweep_svg(const std::vector<SweepPoint>& points, const std::string& title) {
  // Left: heatmaps (rows: load points; columns: p50 p90 p95 p99 p99.9) of
  // TTFT and E2E, colour on a log scale per map. Right: P99 TTFT and ITL vs load.
  const char* cols[] = {"p50", "p90", "p95", "p99", "p99.9"};
  auto row = [](const Percentiles& p) { return std::vector<double>{p.median, p.p90, p.p95, p.p99, p.p999}; };
  const int cw = 64, rh = 26, left = 110, top = 60, gap = 40;
  const int map_w = 5 * cw, map_h = static_cast<int>(points.size()) * rh;
  const int chart_x = left + 2 * (map_w + gap) + 20, chart_w = 360, chart_h = std::max(map_h, 200);
  const int width = chart_x + chart_w + 60, height = top + std::max(map_h, chart_h) + 90;
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"10\" y=\"22\" font-size=\"15\">{}</text>\n",
      width, height, title);
  auto heat = [&](int x0, const char* name, auto get) {
    double lo = 1e300, hi = 0;
    for (const auto& p : points)
      for (double v : row(get(p.summary))) lo = std::min(lo, std::max(v, 1e-3)), hi = std::max(hi, v);
    svg += fmt::format("<text x=\"{}\" y=\"{}\">{} (ms)</text>\n", x0, top - 22, name);
    for (int c = 0; c < 5; c++)
      svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", x0 + c * cw + cw / 2, top - 6,
                         cols[c]);
    for (size_t r = 0; r < points.size(); r++) {
      const auto vals = row(get(points[r].summary));
      for (int c = 0; c < 5; c++) {
        const double t =
            hi > lo ? (std::log(std::max(vals[c], 1e-3)) - std::log(lo)) / (std::log(hi) - std::log(lo)) : 0.0;
        const int red = static_cast<int>(255 * std::clamp(t, 0.0, 1.0)), blue = 255 - red;
        svg += fmt::format(
            "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"rgb({},{},{})\" stroke=\"white\"/>\n",
            x0 + c * cw, top + static_cast<int>(r) * rh, cw, rh, red, 80, blue);
        svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"white\">{:.0f}</text>\n",
                           x0 + c * cw + cw / 2, top + static_cast<int>(r) * rh + 17, vals[c]);
      }
    }
  };
  for (size_t r = 0; r < points.size(); r++)
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n", left - 8,
                       top + static_cast<int>(r) * rh + 17, points[r].load);
  heat(left, "TTFT", [](const LoadSummary& s) { return s.ttft_ms; });
  heat(left + map_w + gap, "E2E latency", [](const LoadSummary& s) { return s.e2e_ms; });

  // P99 curves.
  double ymax = 1e-9;
  for (const auto& p : points) ymax = std::max({ymax, p.summary.ttft_ms.p99, p.summary.itl_ms.p99});
  const double xmax =
      std::max(1e-9, points.empty() ? 1.0 : std::max_element(points.begin(), points.end(), [](auto& a, auto& b) {
                                              return a.load_value < b.load_value;
                                            })->load_value);
  svg += fmt::format("<text x=\"{}\" y=\"{}\">P99 latency (ms) vs load</text>\n", chart_x, top - 22);
  svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888\"/>\n", chart_x,
                     top, chart_w, chart_h);
  svg += fmt::format("<text x=\"{}\" y=\"{}\">{:.0f}</text>\n<text x=\"{}\" y=\"{}\">0</text>\n", chart_x - 36,
                     top + 10, ymax, chart_x - 14, top + chart_h);
  auto curve = [&](const char* color, const char* name, int legend_y, auto get) {
    std::string path;
    for (const auto& p : points) {
      const double x = chart_x + p.load_value / xmax * chart_w;
      const double y = top + chart_h - get(p.summary) / ymax * chart_h;
      path += fmt::format("{}{:.1f},{:.1f} ", path.empty() ? "M" : "L", x, y);
      svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", x, y, color);
    }
    svg += fmt::format("<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n", path, color);
    svg += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"{}\">{}</text>\n", chart_x + 10, legend_y, color, name);
  };
  curve("#c33", "TTFT p99", top + 18, [](const LoadSummary& s) { return s.ttft_ms.p99; });
  curve("#36c", "ITL p99", top + 34, [](const LoadSummary& s) { return s.itl_ms.p99; });
  for (const auto& p : points)
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                       chart_x + p.load_value / xmax * chart_w, top + chart_h + 16, p.load);
  svg += "</svg>\n";
  return svg;
}

}  // namespace kestrel

#include "measure/profile_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kestrel {

ProfileSummary summarize_profile(const std::vector<ProfileEvent>& events) {
  ProfileSummary s;
  std::map<std::string, OpSummary> by_op;
  for (const auto& e : events) {
    if (e.track == "communication") {  // concurrent with the operators: not in their total
      s.transfers++;
      s.in_flight_ns += static_cast<double>(e.dur_ns);
      continue;
    }
    if (e.op.find(" (blocking)") != std::string::npos || e.op.rfind("wait ", 0) == 0)
      s.exposed_ns += static_cast<double>(e.dur_ns);
    OpSummary& o = by_op[e.op];
    o.op = e.op;
    o.calls++;
    o.total_ns += static_cast<double>(e.dur_ns);
    o.bytes += e.bytes;
    o.flops += e.flops;
    s.total_ns += static_cast<double>(e.dur_ns);
    s.n_layers = std::max(s.n_layers, e.layer + 1);
    s.ns_by_op_layer[{e.op, e.layer}] += static_cast<double>(e.dur_ns);
  }
  for (auto& [k, v] : by_op) s.ops.push_back(v);
  std::sort(s.ops.begin(), s.ops.end(), [](const OpSummary& a, const OpSummary& b) { return a.total_ns > b.total_ns; });
  return s;
}

std::string render_profile_table(const ProfileSummary& s, size_t top) {
  std::string out = fmt::format("{:<32} {:>8} {:>11} {:>7} {:>12} {:>9} {:>10}\n", "operator", "calls", "total ms",
                                "share", "bytes", "GB/s", "GFLOP/s");
  for (size_t i = 0; i < s.ops.size() && i < top; i++) {
    const OpSummary& o = s.ops[i];
    out += fmt::format("{:<32} {:>8} {:>11.2f} {:>6.1f}% {:>12.3g} {:>9.1f} {:>10.1f}\n", o.op, o.calls,
                       o.total_ns / 1e6, s.total_ns > 0 ? 100.0 * o.total_ns / s.total_ns : 0.0, o.bytes, o.gb_per_s(),
                       o.gflop_per_s());
  }
  out += fmt::format("{:<32} {:>8} {:>11.2f}\n", "total", "", s.total_ns / 1e6);
  return out;
}

std::string render_communication(const ProfileSummary& s) {
  if (s.transfers == 0) return "";
  return fmt::format(
      "communication: {} transfers, {:.2f} ms in flight, {:.2f} ms of it waited for by this rank; overlapped "
      "fraction {:.1f}%\n",
      s.transfers, s.in_flight_ns / 1e6, s.exposed_ns / 1e6, 100.0 * s.overlapped_fraction());
}

namespace {

std::string escape_xml(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

// White (no time) to deep red (the hottest cell), on a square-root scale so
// that mid-sized cells stay visible.
std::string heat_color(double fraction) {
  const double f = std::sqrt(std::clamp(fraction, 0.0, 1.0));
  const int r = 255 - static_cast<int>(f * 75), g = 255 - static_cast<int>(f * 235), b = 255 - static_cast<int>(f * 225);
  return fmt::format("rgb({},{},{})", r, g, b);
}

}  // namespace

std::string render_profile_heatmap_svg(const ProfileSummary& s, const std::string& title) {
  // Rows: operators by total time; columns: layers, then the head (embedding/output).
  std::vector<std::string> ops;
  for (const auto& o : s.ops) ops.push_back(o.op);
  const int cols = s.n_layers + 1;
  double hottest = 0;
  for (const auto& [k, v] : s.ns_by_op_layer) hottest = std::max(hottest, v);
  const int cell_w = std::max(14, std::min(40, 900 / std::max(1, cols))), cell_h = 22, left = 230, top = 60;
  const int width = left + cols * cell_w + 40, height = top + static_cast<int>(ops.size()) * cell_h + 70;
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"11\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{}\" y=\"22\" font-size=\"15\">{}</text>\n"
      "<text x=\"{}\" y=\"40\" fill=\"#555\">time per operator and layer; darkest cell = {:.2f} ms; total {:.1f} ms</text>\n",
      width, height, left, escape_xml(title), left, hottest / 1e6, s.total_ns / 1e6);
  for (size_t r = 0; r < ops.size(); r++) {
    const int y = top + static_cast<int>(r) * cell_h;
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n", left - 6, y + 15, escape_xml(ops[r]));
    for (int c = 0; c < cols; c++) {
      const int layer = c < s.n_layers ? c : -1;
      auto it = s.ns_by_op_layer.find({ops[r], layer});
      const double ns = it == s.ns_by_op_layer.end() ? 0.0 : it->second;
      svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" stroke=\"#ddd\"><title>{} layer {}: {:.3f} ms</title></rect>\n",
                         left + c * cell_w, y, cell_w, cell_h, hottest > 0 ? heat_color(ns / hottest) : "white",
                         escape_xml(ops[r]), layer < 0 ? std::string("head") : std::to_string(layer), ns / 1e6);
    }
  }
  const int axis_y = top + static_cast<int>(ops.size()) * cell_h + 16;
  for (int c = 0; c < cols; c++) {
    if (c < s.n_layers && cols > 24 && c % 2) continue;  // thin the labels of deep models
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", left + c * cell_w + cell_w / 2, axis_y,
                       c < s.n_layers ? std::to_string(c) : std::string("head"));
  }
  svg += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#555\">layer</text>\n</svg>\n", left, axis_y + 20);
  return svg;
}

std::string render_expert_load(const std::map<int, std::vector<int64_t>>& load) {
  if (load.empty()) return "";
  std::string out = fmt::format("{:<7} {:>10} {:>14} {:>14} {:>10}\n", "layer", "routed", "experts used", "busiest",
                                "max/mean");
  for (const auto& [layer, counts] : load) {
    int64_t total = 0, used = 0, best = 0;
    size_t best_id = 0;
    for (size_t e = 0; e < counts.size(); e++) {
      total += counts[e];
      used += counts[e] > 0;
      if (counts[e] > best) best = counts[e], best_id = e;
    }
    const double mean = counts.empty() ? 0 : static_cast<double>(total) / static_cast<double>(counts.size());
    out += fmt::format("{:<7} {:>10} {:>8} of {:<3} {:>6} ({:>4.1f}%) {:>10.2f}\n", layer, total, used, counts.size(),
                       fmt::format("#{}", best_id), total ? 100.0 * static_cast<double>(best) / static_cast<double>(total) : 0.0,
                       mean > 0 ? static_cast<double>(best) / mean : 0.0);
  }
  return out;
}

}  // namespace kestrel

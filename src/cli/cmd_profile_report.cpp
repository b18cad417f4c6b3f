// kestrel profile-report FILE.json [--svg OUT.svg]: operators ranked by time
// with bytes moved and achieved throughput, and an operator x layer heatmap.
#include <fmt/format.h>

#include <fstream>

#include "cli/commands.h"
#include "core/error.h"
#include "measure/profile_report.h"

namespace kestrel::cli {

void register_profile_report(CLI::App& app) {
  static std::string path, svg_path;
  static size_t top = 30;
  auto* cmd = add_command(app, "profile-report", "Rank operators from a --profile trace and draw a layer heatmap", [] {
    const ProfileSummary s = summarize_profile(read_chrome_trace(path));
    if (s.ops.empty()) throw Error(fmt::format("{}: the trace has no operator events", path));
    fmt::print("{}", render_profile_table(s, top));
    fmt::print("{}", render_communication(s));
    if (const auto load = read_expert_load(path); !load.empty())
      fmt::print("\nexpert load (tokens routed to each expert, per MoE layer):\n{}", render_expert_load(load));
    const std::string out = svg_path.empty() ? path + ".heatmap.svg" : svg_path;
    std::ofstream f(out);
    if (!f) throw Error(fmt::format("{}: cannot write the heatmap", out));
    f << render_profile_heatmap_svg(s, "kestrel profile: " + path);
    fmt::print("heatmap: {}\n", out);
    return 0;
  });
  cmd->add_option("trace", path, "Chrome trace written by --profile")->required();
  cmd->add_option("--svg", svg_path, "Heatmap file (default: TRACE.heatmap.svg)");
  cmd->add_option("--top", top, "Operators to list")->capture_default_str();
}

}  // namespace kestrel::cli

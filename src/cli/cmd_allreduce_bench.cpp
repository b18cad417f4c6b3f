// kestrel allreduce-bench (under mpirun): the all-reduce a split model makes
// twice a layer, measured at one layer's activations for 1..64 rows, fitted
// to alpha + beta * S, then a model's communication per decode step and a
// prediction for hosts on a network (docs/parallel.md).
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/parallel_flags.h"
#include "core/error.h"
#include "hw/limits.h"
#include "measure/allreduce_bench.h"
#include "measure/model_cost.h"
#include "runtime/loaded_model.h"

namespace kestrel::cli {
namespace {

struct AllReduceBenchFlags {
  std::string model;
  int64_t dim = 0, layers = 0;
  std::vector<int64_t> rows{1, 2, 4, 8, 16, 32, 64};
  std::vector<int> hosts{2, 4, 8};
  std::vector<double> link_gbps{25, 100};
  double latency_us = 10;
  int reps = 200, threads = 0;
  double timeout_s = 60;
  std::vector<double> touched{0.25, 0.5, 1.0};
  bool no_expert_sums = false;
};

int run(AllReduceBenchFlags& f) {
  std::unique_ptr<GgufFile> file;
  ModelConfig c;
  if (!f.model.empty()) {
    file = open_model_file(f.model, "", MappedFile::Mode::Map);
    c = read_model_config(*file);
    f.dim = c.n_embd;
    f.layers = c.n_layer;
  }
  if (f.dim <= 0 || f.layers <= 0) throw Error("give -m MODEL, or --dim and --layers");
  std::shared_ptr<Communicator> comm = join_mpi_world(f.timeout_s);
  if (comm->size() < 2) throw Error("allreduce-bench measures between ranks: start it with mpirun -np 2 (or more)");
  const auto points = measure_all_reduce(*comm, f.dim, f.rows, f.reps);
  // The MoE alternative at the same sizes: the model's own expected
  // fraction of rows per rank (uniform routing, ep = ranks) among them.
  std::vector<double> touched = f.no_expert_sums ? std::vector<double>{} : f.touched;
  const MoeRouting& route = c.moe.routing;
  const double model_touched =
      file && route.n_expert > 0 ? expected_touched_fraction(route.n_expert, route.n_used, comm->size()) : -1;
  if (model_touched >= 0 && !f.no_expert_sums) touched.push_back(model_touched);
  std::vector<std::vector<AllReducePoint>> a2a;
  for (double h : touched) a2a.push_back(measure_expert_all_to_all(*comm, f.dim, f.rows, h, f.reps));
  if (comm->rank() != 0) return 0;

  const AlphaBeta fit = fit_alpha_beta(points);
  fmt::print("all-reduce of {} rows x {} floats, {}, median of {}:\n\n", "1..64", f.dim, comm->describe(), f.reps);
  fmt::print("| rows | bytes | median µs | fit µs | GB/s |\n| ---: | ---: | ---: | ---: | ---: |\n");
  for (const auto& p : points)
    fmt::print("| {} | {} | {:.1f} | {:.1f} | {:.2f} |\n", p.rows, p.bytes, p.median_us, fit.us(static_cast<double>(p.bytes)),
               static_cast<double>(p.bytes) / p.median_us / 1e3);
  fmt::print("\nfit: alpha = {:.1f} µs, beta = {:.3f} µs/KiB (1/beta = {:.2f} GB/s), R² = {:.3f}\n", fit.alpha_us,
             fit.beta_us_per_byte * 1024, fit.beta_us_per_byte > 0 ? 1e-3 / fit.beta_us_per_byte : 0.0, fit.r2);

  if (!a2a.empty()) {
    fmt::print("\nMoE output summed over the {} ranks (ep={}): all-reduce against all-to-all (rows each rank "
               "computed, then all-gather), median µs (bytes one rank sends, as a share of a ring all-reduce's):\n\n",
               comm->size(), comm->size());
    fmt::print("| rows | all-reduce |");
    for (size_t i = 0; i < touched.size(); i++)
      fmt::print(" all-to-all, {:.0f}% of rows{} |", 100 * touched[i],
                 model_touched >= 0 && i + 1 == touched.size() ? " (this model)" : "");
    fmt::print("\n| ---: | ---: |{}\n", [&] {
      std::string sep;
      for (size_t i = 0; i < touched.size(); i++) sep += " ---: |";
      return sep;
    }());
    for (size_t j = 0; j < points.size(); j++) {
      fmt::print("| {} | {:.1f} |", points[j].rows, points[j].median_us);
      const double b = static_cast<double>(points[j].bytes);
      for (size_t i = 0; i < touched.size(); i++)
        fmt::print(" {:.1f} ({:.2f}x) |", a2a[i][j].median_us,
                   expert_all_to_all_bytes_sent(b, comm->size(), touched[i], f.dim) /
                       ring_all_reduce_bytes_sent(b, comm->size()));
      fmt::print("\n");
    }
  }

  const int steps_sums = static_cast<int>(2 * f.layers);  // attention and FFN of each layer
  fmt::print("\nper decode step ({} layers: {} all-reduces), with the measured fit:\n\n", f.layers, steps_sums);
  double compute_ms_1 = 0;  // one process's decode step (roofline), when a model is given
  MeasuredLimits lim;
  ModelCost cost;
  if (file) {
    cost = model_cost(*file, c);
    lim = cached_or_measured_limits(f.threads > 0 ? f.threads : default_thread_count());
  }
  // Roofline of a decode step of `rows` sequences on one host holding 1/hosts of the weights.
  auto compute_ms = [&](int64_t rows, int hosts) {
    if (!file || lim.read_bandwidth_gbs <= 0) return 0.0;
    const double stream = static_cast<double>(cost.weight_bytes_per_token) / hosts / (lim.read_bandwidth_gbs * 1e9);
    const double math = lim.int8_dot_gops > 0 ? rows * cost.flops_per_token(c, 512) / hosts / (lim.int8_dot_gops * 1e9) : 0;
    return 1e3 * std::max(stream, math);
  };
  compute_ms_1 = compute_ms(1, 1);
  fmt::print("| rows | communication ms | compute ms (roofline / {} ranks) | communication share |\n", comm->size());
  fmt::print("| ---: | ---: | ---: | ---: |\n");
  for (const auto& p : points) {
    const double comm_ms = steps_sums * fit.us(static_cast<double>(p.bytes)) / 1e3;
    const double comp = compute_ms(p.rows, comm->size());
    fmt::print("| {} | {:.2f} | {} | {} |\n", p.rows, comm_ms, comp > 0 ? fmt::format("{:.2f}", comp) : "-",
               comp > 0 ? fmt::format("{:.0f}%", 100 * comm_ms / (comm_ms + comp)) : "-");
  }
  if (!file) return 0;
  fmt::print("\nprediction: the model split over N hosts like this one (each streaming 1/N of the weights at {:.1f} "
             "GB/s), joined at the link speed with {:.0f} µs a hop, ring all-reduce, no overlap; decode tokens/s "
             "(one process here: {:.1f} at batch 1):\n\n",
             lim.read_bandwidth_gbs, f.latency_us, compute_ms_1 > 0 ? 1e3 / compute_ms_1 : 0.0);
  fmt::print("| hosts | link | comm ms/step (1 row) | tok/s batch 1 | tok/s batch 16 | tok/s batch 64 |\n");
  fmt::print("| ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (int h : f.hosts)
    for (double g : f.link_gbps) {
      auto tps = [&](int64_t rows) {
        const double bytes = static_cast<double>(rows * f.dim * 4);
        const double step_ms = compute_ms(rows, h) + steps_sums * ring_all_reduce_us(bytes, h, g, f.latency_us) / 1e3;
        return rows * 1e3 / step_ms;
      };
      fmt::print("| {} | {:.0f} Gb/s | {:.2f} | {:.1f} | {:.0f} | {:.0f} |\n", h, g,
                 steps_sums * ring_all_reduce_us(f.dim * 4.0, h, g, f.latency_us) / 1e3, tps(1), tps(16), tps(64));
    }
  return 0;
}

}  // namespace

void register_allreduce_bench(CLI::App& app) {
  static AllReduceBenchFlags f;
  auto* cmd = add_command(app, "allreduce-bench",
                          "Under mpirun: all-reduce time at a model's activation sizes, the alpha + beta*S fit, "
                          "and a prediction for N hosts",
                          [] { return run(f); });
  cmd->add_option("-m,--model", f.model, "GGUF model whose width and depth set the sizes (and whose weights the prediction streams)");
  cmd->add_option("--dim", f.dim, "Without -m: floats per row");
  cmd->add_option("--layers", f.layers, "Without -m: layers (two all-reduces each)");
  cmd->add_option("--rows", f.rows, "Rows per all-reduce (a step's batch)")->delimiter(',')->capture_default_str();
  cmd->add_option("-r,--reps", f.reps, "Timed all-reduces per size")->check(CLI::Range(1, 100000))->capture_default_str();
  cmd->add_option("--hosts", f.hosts, "Host counts to predict for")->delimiter(',')->capture_default_str();
  cmd->add_option("--link-gbps", f.link_gbps, "Network speeds to predict for, Gb/s")->delimiter(',')->capture_default_str();
  cmd->add_option("--latency-us", f.latency_us, "Per-hop latency of that network, µs (an assumption: 10 for TCP over 25-100 GbE)")
      ->capture_default_str();
  cmd->add_option("-t,--threads", f.threads, "Threads the one-host roofline assumes (0: all cores)")->capture_default_str();
  cmd->add_option("--expert-touched", f.touched,
                  "Fractions of a step's rows a rank's experts compute, for the all-to-all expert sum (an MoE model "
                  "adds its own expected one)")
      ->delimiter(',')
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_flag("--no-expert-sums", f.no_expert_sums, "Measure the all-reduce only");
  cmd->add_option("--parallel-timeout", f.timeout_s, "Seconds a rank waits in an all-reduce before giving up")->capture_default_str();
}

}  // namespace kestrel::cli

#pragma once
// --parallel tp=N and --parallel-timeout, for the commands that run a model
// step by step (run, bench, perplexity, serve). Under mpirun every rank runs
// the same command line: rank 0 does the command's work, the others load
// their share of the model and follow rank 0's steps (LoadedModel::follow_leader).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <string>

#include "core/error.h"
#include "parallel/mpi_world.h"
#include "parallel/parallel_spec.h"
#include "runtime/loaded_model.h"

namespace kestrel::cli {

struct ParallelFlags {
  std::string spec;  // empty: one process
  double timeout_s = 60;
  bool no_overlap = false;
  bool no_step_pipelining = false;
  std::string expert_sum;  // empty: auto
};

inline void add_parallel_options(CLI::App* cmd, ParallelFlags& p) {
  cmd->add_option("--parallel", p.spec,
                  "Split the model over the ranks of `mpirun -np N`: tp=N (tensor parallel: heads and FFN rows), "
                  "ep=N (expert parallel: MoE experts), pp=N (pipeline: layer ranges), or a product (tp=2,ep=2,pp=2: "
                  "N = 8)");
  cmd->add_option("--parallel-timeout", p.timeout_s,
                  "Seconds a rank waits inside a collective before it declares another rank dead and ends the job")
      ->capture_default_str();
  cmd->add_flag("--parallel-no-overlap", p.no_overlap,
                "Sum each step's partial results in one blocking all-reduce instead of overlapping two halves");
  cmd->add_flag("--parallel-no-step-pipelining", p.no_step_pipelining,
                "Under pp, finish each step (its sampling included) before the next enters stage 0, instead of "
                "keeping one step per stage in flight over different requests");
  cmd->add_option("--parallel-expert-sum", p.expert_sum,
                  "Under ep, how MoE outputs are summed over the ranks: all-reduce, all-to-all (each rank sends "
                  "only the rows its experts computed to their owner, then an all-gather), or auto (default: "
                  "all-to-all for blocking sums of 64 KiB and more, all-reduce for smaller and overlapped ones)");
}

// Joins the MPI job when --parallel is given (the engine options then carry
// the communicator); Error when the split does not match the job.
inline void apply_parallel_flags(const ParallelFlags& p, LoadOptions& eo) {
  if (p.spec.empty()) {
    if (!p.expert_sum.empty()) throw Error("--parallel-expert-sum needs --parallel with ep (under mpirun)");
    if (p.no_step_pipelining) throw Error("--parallel-no-step-pipelining needs --parallel with pp (under mpirun)");
    return;
  }
  const ParallelSpec spec = parse_parallel_spec(p.spec);
  if (p.no_step_pipelining && spec.pp == 1)
    throw Error(
        fmt::format("--parallel-no-step-pipelining needs pipeline parallelism (--parallel {} has no pp)", p.spec));
  if (!p.expert_sum.empty()) {
    eo.expert_sum = parse_expert_sum(p.expert_sum);
    if (spec.ep == 1)
      throw Error(fmt::format("--parallel-expert-sum {} needs expert parallelism (--parallel {} has no ep)",
                              p.expert_sum, p.spec));
  }
  eo.comm = join_mpi_world(p.timeout_s);
  if (eo.comm->size() != spec.ranks())
    throw Error(fmt::format("--parallel {} needs {} ranks but this job has {} (start it with mpirun -np {})", p.spec,
                            spec.ranks(), eo.comm->size(), spec.ranks()));
  eo.expert_groups = spec.ep;
  eo.pipeline_stages = spec.pp;
  eo.parallel_overlap = !p.no_overlap;
  eo.parallel_step_pipelining = !p.no_step_pipelining;
  if (eo.comm->size() == 1) eo.comm = nullptr;  // tp=1: one process, as without the flag
}

// A follower rank's whole command: run rank 0's steps until it stops, then
// write this rank's profile beside rank 0's (TRACE.rankN.json) if asked.
inline int follow_leader(LoadedModel& e, const std::string& profile_path) {
  e.follow_leader();
  if (e.profiler && !profile_path.empty()) {
    std::string path = profile_path;
    const size_t dot = path.rfind(".json");
    const std::string tag = fmt::format(".rank{}", e.comm->rank());
    path = dot == std::string::npos ? path + tag : path.insert(dot, tag);
    e.profiler->write_chrome_trace(path);
  }
  return 0;
}

}  // namespace kestrel::cli

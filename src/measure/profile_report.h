#pragma once
// Turns a profile into a ranking of operators (time, share, bytes, achieved
// GB/s and GFLOP/s) and an operator x layer heatmap as SVG.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/profiler.h"

namespace kestrel {

struct OpSummary {
  std::string op;
  int64_t calls = 0;
  double total_ns = 0, bytes = 0, flops = 0;
  double gb_per_s() const { return total_ns > 0 ? bytes / total_ns : 0; }
  double gflop_per_s() const { return total_ns > 0 ? flops / total_ns : 0; }
};

struct ProfileSummary {
  std::vector<OpSummary> ops;  // most total time first
  double total_ns = 0;
  int n_layers = 0;            // highest layer index + 1
  std::map<std::pair<std::string, int>, double> ns_by_op_layer;  // layer -1: outside layers
  // Under --parallel: transfers in flight (the communication track), and the
  // part of them this rank waited for (blocking all-reduces and waits).
  int64_t transfers = 0;
  double in_flight_ns = 0, exposed_ns = 0;
  // The share of communication time hidden behind compute.
  double overlapped_fraction() const { return in_flight_ns > 0 ? std::max(0.0, 1.0 - exposed_ns / in_flight_ns) : 0; }
};

ProfileSummary summarize_profile(const std::vector<ProfileEvent>& events);
std::string render_profile_table(const ProfileSummary& s, size_t top);
// "communication: ..." with the overlapped fraction; empty without transfers.
std::string render_communication(const ProfileSummary& s);
std::string render_profile_heatmap_svg(const ProfileSummary& s, const std::string& title);
// Per MoE layer: routed token-slots, experts that got any, the busiest
// expert and the load imbalance (busiest / mean). Empty for dense models.
std::string render_expert_load(const std::map<int, std::vector<int64_t>>& load);

}  // namespace kestrel

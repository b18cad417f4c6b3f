#pragma once
// Cores, threads, caches and NUMA nodes of this machine (from hwloc).
#include <cstdint>
#include <string>
#include <vector>

namespace kestrel {

struct CacheLevel {
  int level = 0;            // 1, 2, 3
  std::string kind;         // "data", "instruction", "unified"
  int64_t size_bytes = 0;   // per instance
  int instances = 0;        // how many of them (per core, per cluster, ...)
  int line_bytes = 0;
};

struct Topology {
  int packages = 0, cores = 0, threads = 0, numa_nodes = 0;
  std::vector<CacheLevel> caches;
  int64_t memory_bytes = 0;
  // Convenience: per-core data cache sizes the tiling uses (0 when unknown).
  int64_t l1d_bytes() const;
  int64_t l2_bytes() const;
  int64_t l3_bytes() const;  // per instance
};

const Topology& topology();  // probed once

}  // namespace kestrel

#pragma once
// --parallel tp=N[,ep=M][,pp=K]: how a model is split over the ranks mpirun
// started (their number must be the product).
#include <string>

namespace kestrel {

struct ParallelSpec {
  int tp = 1;  // tensor parallel: heads and FFN rows split across ranks
  int ep = 1;  // expert parallel (MoE)
  int pp = 1;  // pipeline parallel: layer ranges
  int ranks() const { return tp * ep * pp; }
  bool single() const { return ranks() == 1; }
  std::string describe() const;  // "tp=2"
};

// Parses "tp=2", "tp=2,ep=1", ...; Error naming what is wrong.
ParallelSpec parse_parallel_spec(const std::string& text);

}  // namespace kestrel

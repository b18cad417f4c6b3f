#pragma once
// Speculative decoding against plain decoding, measured in the same run:
// for each draft length, repetitions alternate a plain greedy generation and
// a speculative one of the same prompt (so machine drift hits both alike),
// and report medians, the speed-up and the acceptance rate — the points of
// the draft-length vs speed-up curve.
#include <cstdint>
#include <vector>

#include "runtime/loaded_model.h"
#include "spec/spec_source.h"

namespace kestrel {

struct SpecBenchRow {
  int draft_max = 0;
  double plain_ts = 0, spec_ts = 0;  // decode tokens per second, medians
  double acceptance = 0;             // accepted / drafted
  double tokens_per_step = 0;        // generated tokens per verification step with a draft
};

// One curve point from the repetitions' decode rates (medians) and the
// summed counters: steps with a draft, drafted and accepted tokens.
SpecBenchRow spec_bench_row(int draft_max, const std::vector<double>& plain_ts, const std::vector<double>& spec_ts,
                            double draft_steps, double drafted, double accepted);

// source: the proposer, built on e; governed: as GenerationParams::spec_governed.
std::vector<SpecBenchRow> run_spec_bench(LoadedModel& e, const std::vector<int32_t>& prompt, int64_t n_gen,
                                         const std::vector<int>& draft_maxes, int reps, const SpecSource& source,
                                         bool governed = false);

}  // namespace kestrel

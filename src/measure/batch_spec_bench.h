#pragma once
// Speculative against plain decoding with several requests decoding at once,
// through the server's engine (continuous batching, drafts of all requests
// verified in one forward). The batch-1 curve is measure/spec_bench.h's.
#include <cstdint>
#include <vector>

#include "runtime/proposer.h"
#include "runtime/loaded_model.h"
#include "measure/spec_bench.h"

namespace kestrel {

struct BatchSpecSource {
  Proposer* proposer = nullptr;  // a draft model's cache must hold one sequence per request
  bool governed = false;         // as ExecConfig::spec_governed
};

// prompts: one per request (all submitted together, greedy, n_gen tokens
// each, end-of-text ignored). Rows as run_spec_bench's, where t/s is the
// aggregate decode rate: the tokens after each request's first, over the
// time from the last first token to the last request's end (medians over
// reps; plain and speculative runs alternate).
std::vector<SpecBenchRow> run_batch_spec_bench(LoadedModel& e, const std::vector<std::vector<int32_t>>& prompts,
                                               int64_t n_gen, const std::vector<int>& draft_maxes, int reps,
                                               const BatchSpecSource& source);

}  // namespace kestrel

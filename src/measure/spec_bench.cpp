#include "measure/spec_bench.h"

#include <algorithm>

#include "core/median.h"
#include "runtime/generator.h"

namespace kestrel {
namespace {

double decode_rate(const GenerationResult& r) {
  return r.decode_seconds > 0 ? static_cast<double>(r.tokens.size()) / r.decode_seconds : 0.0;
}

}  // namespace

SpecBenchRow spec_bench_row(int draft_max, const std::vector<double>& plain_ts, const std::vector<double>& spec_ts,
                            double draft_steps, double drafted, double accepted) {
  SpecBenchRow row;
  row.draft_max = draft_max;
  row.plain_ts = median(plain_ts);
  row.spec_ts = median(spec_ts);
  row.acceptance = drafted > 0 ? accepted / drafted : 0.0;
  row.tokens_per_step = draft_steps > 0 ? (accepted + draft_steps) / draft_steps : 0.0;
  return row;
}

std::vector<SpecBenchRow> run_spec_bench(LoadedModel& e, const std::vector<int32_t>& prompt, int64_t n_gen,
                                         const std::vector<int>& draft_maxes, int reps, const SpecSource& source,
                                         bool governed) {
  GenerationParams p;
  p.max_tokens = n_gen;
  p.sampling.temperature = 0.0f;
  p.ignore_eos = true;
  generate(e, prompt, p);  // warm-up
  std::vector<SpecBenchRow> rows;
  for (const int k : draft_maxes) {
    std::vector<double> plain, spec;
    int64_t drafted = 0, accepted = 0, steps = 0;
    for (int r = 0; r < reps; r++) {
      plain.push_back(decode_rate(generate(e, prompt, p)));
      GenerationParams spec_params = p;
      spec_params.spec_draft_max = k;
      spec_params.spec_governed = governed;
      source.attach(spec_params);
      const GenerationResult s = generate(e, prompt, spec_params);
      spec.push_back(decode_rate(s));
      drafted += s.spec_drafted;
      accepted += s.spec_accepted;
      steps += s.spec_steps;
    }
    rows.push_back(spec_bench_row(k, plain, spec, static_cast<double>(steps), static_cast<double>(drafted),
                                  static_cast<double>(accepted)));
  }
  return rows;
}

}  // namespace kestrel

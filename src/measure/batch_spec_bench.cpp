#include "measure/batch_spec_bench.h"

#include <algorithm>

#include "core/error.h"
#include "serving/engine/metrics.h"
#include "serving/engine/serving_engine.h"

namespace kestrel {
namespace {

struct BatchRun {
  double decode_ts = 0;
  double drafts = 0, drafted = 0, accepted = 0;
};

BatchRun run_once(LoadedModel& e, const std::vector<std::vector<int32_t>>& prompts, int64_t n_gen, int draft_max,
                  const BatchSpecSource& source) {
  ServerMetrics metrics;
  ServingConfig c;
  c.exec.scheduler.max_batch_size = static_cast<int>(prompts.size());
  c.exec.scheduler.max_batch_tokens = e.model->max_batch_tokens();
  c.exec.scheduler.max_wait_ms = 0;
  c.exec.spec_draft_max = draft_max;
  if (draft_max > 0) c.exec.proposer = source.proposer;
  c.exec.spec_governed = source.governed;
  ServingEngine engine(e, c, metrics);
  std::vector<std::shared_ptr<RequestChannel>> channels;
  for (const auto& p : prompts) {
    ServeRequest r;
    r.params.prompt = p;
    r.params.max_tokens = n_gen;
    r.params.sampling.temperature = 0.0f;
    r.params.ignore_eos = true;
    auto ch = engine.submit(std::move(r));
    if (!ch) throw Error("batch speculation bench: the serving queue refused a request");
    channels.push_back(std::move(ch));
  }
  double last_first = 0, last_end = 0, tokens = 0;
  for (auto& ch : channels) {
    for (bool done = false; !done;)
      for (const StreamEvent& ev : ch->pop(1000)) {
        if (!ev.done) continue;
        done = true;
        if (ev.finish_reason == "error") throw Error("batch speculation bench: " + ev.error);
        last_first = std::max(last_first, ev.ttft_ms);
        last_end = std::max(last_end, ev.e2e_ms);
        tokens += static_cast<double>(std::max<int64_t>(0, ev.completion_tokens - 1));
      }
  }
  BatchRun r;
  r.decode_ts = last_end > last_first ? tokens / ((last_end - last_first) / 1000) : 0.0;
  r.drafts = metrics.counter("kestrel_spec_drafts_total");
  r.drafted = metrics.counter("kestrel_spec_drafted_tokens_total");
  r.accepted = metrics.counter("kestrel_spec_accepted_tokens_total");
  return r;
}

}  // namespace

std::vector<SpecBenchRow> run_batch_spec_bench(LoadedModel& e, const std::vector<std::vector<int32_t>>& prompts,
                                               int64_t n_gen, const std::vector<int>& draft_maxes, int reps,
                                               const BatchSpecSource& source) {
  run_once(e, prompts, n_gen, 0, source);  // warm-up
  std::vector<SpecBenchRow> rows;
  for (const int k : draft_maxes) {
    std::vector<double> plain, spec;
    double drafts = 0, drafted = 0, accepted = 0;
    for (int r = 0; r < reps; r++) {
      plain.push_back(run_once(e, prompts, n_gen, 0, source).decode_ts);
      const BatchRun s = run_once(e, prompts, n_gen, k, source);
      spec.push_back(s.decode_ts);
      drafts += s.drafts;
      drafted += s.drafted;
      accepted += s.accepted;
    }
    rows.push_back(spec_bench_row(k, plain, spec, drafts, drafted, accepted));
  }
  return rows;
}

}  // namespace kestrel

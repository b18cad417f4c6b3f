#pragma once
// Whether speculation pays, measured rather than assumed: acceptance alone
// does not say it (at batch 8 a draft model agreeing 93% of the time still
// lost 28%: verification multiplies the compute of a step that was already
// reading its weights once for 8 rows). The governor alternates short
// probes — a window of steps with drafts, one without — and then runs the
// faster mode for a while before probing again. Pure logic: the caller
// reports each step's generated tokens and wall time. Opt-in
// (--spec-governed): on the shared 2-vCPU VM its 8-step probes are as noisy
// as the effect, and runs of the batch-8 draft-model case gave 0.83x and
// 1.30x against 0.73-0.97x ungoverned, so it is not shown to pay yet.
#include <cstdint>

namespace kestrel {

class SpecGovernor {
 public:
  // window: steps per probe of each mode; period: steps run on a decision.
  explicit SpecGovernor(int window = 16, int period = 256);
  bool drafting() const;  // whether the coming step may draft
  // After each decode step: tokens generated in it (all requests) and its wall time.
  void record(int64_t tokens, double seconds);
  // Tokens per second of the last probes (0 before the first decision).
  double spec_rate() const { return spec_rate_; }
  double plain_rate() const { return plain_rate_; }

 private:
  enum class Phase { ProbeSpec, ProbePlain, Run };
  int window_, period_;
  Phase phase_ = Phase::ProbeSpec;
  int steps_ = 0;  // steps done in the current phase
  int64_t tokens_ = 0;
  double seconds_ = 0;
  double spec_rate_ = 0, plain_rate_ = 0;
  bool run_with_drafts_ = true;
};

}  // namespace kestrel

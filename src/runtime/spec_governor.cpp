#include "runtime/spec_governor.h"

#include <algorithm>

namespace kestrel {

SpecGovernor::SpecGovernor(int window, int period) : window_(std::max(1, window)), period_(std::max(1, period)) {}

bool SpecGovernor::drafting() const {
  switch (phase_) {
    case Phase::ProbeSpec:
      return true;
    case Phase::ProbePlain:
      return false;
    case Phase::Run:
      return run_with_drafts_;
  }
  return true;
}

void SpecGovernor::record(int64_t tokens, double seconds) {
  tokens_ += tokens;
  seconds_ += seconds;
  steps_++;
  const int length = phase_ == Phase::Run ? period_ : window_;
  if (steps_ < length) return;
  const double rate = seconds_ > 0 ? static_cast<double>(tokens_) / seconds_ : 0.0;
  if (phase_ == Phase::ProbeSpec) {
    spec_rate_ = rate;
    phase_ = Phase::ProbePlain;
  } else if (phase_ == Phase::ProbePlain) {
    plain_rate_ = rate;
    run_with_drafts_ = spec_rate_ > plain_rate_;
    phase_ = Phase::Run;
  } else {
    phase_ = Phase::ProbeSpec;
  }
  steps_ = 0;
  tokens_ = 0;
  seconds_ = 0;
}

}  // namespace kestrel

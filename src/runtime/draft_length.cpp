#include "runtime/draft_length.h"

namespace kestrel {

int DraftLength::next() {
  if (max_ <= 0) return 0;
  if (pause_ > 0) {
    pause_--;
    return 0;
  }
  return len_;
}

void DraftLength::update(int drafted, int accepted) {
  if (drafted <= 0) return;
  rate_ = 0.8 * rate_ + 0.2 * static_cast<double>(accepted) / drafted;
  if (accepted == drafted)
    len_ = std::min(max_, len_ + 1);
  else
    len_ = std::max(1, accepted + 1);
  accepted_ = accepted_ || accepted > 0;
  // Verifying k drafts costs about one decode step; below ~1 accepted token
  // per 4 drafted it is cheaper not to draft for a while — the longer, the
  // more often trying again brought nothing (a proposer that never agrees
  // with the model, as on text that does not repeat, then drafts 4 steps in
  // ~260: a few percent over a long generation).
  if (rate_ < 0.25) {
    next_pause_ = accepted_ ? 8 : std::min(256, next_pause_ * 2);
    pause_ = next_pause_;
    accepted_ = false;
    rate_ = 0.5;  // try again after the pause with a neutral estimate
  }
}

}  // namespace kestrel

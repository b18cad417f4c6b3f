#pragma once
// Draft length adapted to how many drafted tokens get accepted: grows by one
// after a fully accepted draft, shrinks to the accepted count plus one after
// a rejection, within [1, max]; pauses speculation (length 0 for a while)
// when acceptance stays poor, since a wasted verification costs more than a
// plain decode step.
#include <algorithm>

namespace kestrel {

class DraftLength {
 public:
  explicit DraftLength(int max) : max_(max), len_(max > 0 ? std::min(max, 4) : 0) {}
  int next();  // the length to draft now (0: decode plainly this step)
  void update(int drafted, int accepted);

 private:
  int max_, len_;
  double rate_ = 1.0;      // running acceptance rate
  int pause_ = 0;          // plain steps left before trying again
  int next_pause_ = 8;     // the pause after the next failing stretch: doubles (to 256) while nothing is accepted
  bool accepted_ = false;  // anything accepted since the last pause
};

}  // namespace kestrel

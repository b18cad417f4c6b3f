#include "spec/ngram_proposer.h"

#include <algorithm>

namespace kestrel {

std::vector<int32_t> NgramProposer::propose(const std::vector<int32_t>& h, int max_draft) const {
  const auto len = static_cast<int64_t>(h.size());
  if (max_draft <= 0) return {};
  for (int n = max_n; n >= min_n; n--) {
    if (len < n + 1) continue;
    const int32_t* tail = h.data() + len - n;
    // The most recent earlier match: scan backwards, excluding the tail itself.
    for (int64_t start = len - n - 1; start >= 0; start--) {
      if (!std::equal(tail, tail + n, h.data() + start)) continue;
      const int64_t from = start + n, to = std::min(len, from + max_draft);
      if (from >= len) continue;
      return {h.begin() + from, h.begin() + to};
    }
  }
  return {};
}

std::vector<std::vector<int32_t>> NgramProposer::propose(const std::vector<DraftRequest>& batch) {
  std::vector<std::vector<int32_t>> drafts;
  drafts.reserve(batch.size());
  for (const DraftRequest& r : batch) drafts.push_back(propose(*r.history, r.max));
  return drafts;
}

}  // namespace kestrel

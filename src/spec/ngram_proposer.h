#pragma once
// Prompt-lookup drafting: the tokens that followed the most recent earlier
// occurrence of the sequence's last n tokens (n from max_n down to min_n),
// searched in everything so far (prompt and output). No second model; it
// pays where the output repeats its input (code and text editing,
// extraction, summaries that quote).
#include <cstdint>
#include <vector>

#include "runtime/proposer.h"

namespace kestrel {

class NgramProposer : public Proposer {
 public:
  int min_n = 1, max_n = 3;
  const char* name() const override { return "ngram"; }
  // Up to max_draft tokens continuing history; empty when nothing matches.
  std::vector<int32_t> propose(const std::vector<int32_t>& history, int max_draft) const;
  std::vector<std::vector<int32_t>> propose(const std::vector<DraftRequest>& batch) override;
};

}  // namespace kestrel

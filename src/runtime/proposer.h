#pragma once
// Where drafted tokens come from, for speculative decoding: the executor
// (`run`'s generator and the server's step) asks a proposer each step for
// drafts of its decoding sequences, tells it what the target computed, and
// says when a sequence is gone. Implemented by the n-gram, draft-model and
// MTP proposers (spec/), chosen by the caller (spec/spec_source.h).
#include <cstdint>
#include <vector>

namespace kestrel {

struct DraftRequest {
  int32_t seq = 0;                                // the target's sequence
  const std::vector<int32_t>* history = nullptr;  // tokens so far, the last one not run by the target yet
  int max = 0;                                    // most tokens to draft
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual const char* name() const = 0;
  // Whether observe() needs the target's final hidden states (the
  // executor computes them only then).
  virtual bool wants_hidden() const { return false; }
  // The target's final hidden states of n rows of seq at positions
  // first_pos.., whose tokens were tokens[0..n). settled: those tokens are
  // the sequence's for good (not drafts under verification).
  virtual void observe(int32_t seq, int64_t first_pos, const int32_t* tokens, const float* hidden, int64_t n,
                       bool settled) {}
  // Drafts for every request, in order (empty where nothing is drafted;
  // never longer than its max).
  virtual std::vector<std::vector<int32_t>> propose(const std::vector<DraftRequest>& batch) = 0;
  // The sequence is gone (its request finished): drop what is kept for it.
  virtual void forget(int32_t seq) {}
};

}  // namespace kestrel

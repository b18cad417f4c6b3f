#pragma once
// Drafts from the target model's own multi-token-prediction block
// (DeepSeek-V3/V3.2/V4 and GLM-5 `nextn` layer): no second model, but it needs the target's
// final hidden states, which the generator hands over after each step.
//
// The MTP row at position p reads token x_{p+1} and the target's hidden
// state at p, and predicts x_{p+2}; its keys and values sit in the target's
// KV cache, in the layer after the trunk's. Rows are run ("caught up") once
// their next token is settled: during prefill as the prompt's states
// arrive, later just before drafting; then the draft chains greedily on the
// block's own output state, as vLLM and SGLang do. Chained rows are
// provisional: the next catch-up rewrites them.
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "runtime/loaded_model.h"
#include "runtime/proposer.h"

namespace kestrel {

class MtpProposer {
 public:
  // Throws Error when the engine's model has no MTP block loaded.
  explicit MtpProposer(LoadedModel& target, int32_t seq = 0);
  // The target's final hidden states of n rows at positions first_pos..,
  // whose tokens were tokens[0..n). settled: those tokens are the sequence's
  // for good (a prompt; not drafts under verification), so the rows whose
  // next token is among them are run now. A step starting at position 0
  // begins a new sequence; one starting past the rows seen so far (after a
  // shared prompt prefix) starts over there.
  void observe(int64_t first_pos, const int32_t* tokens, const float* hidden, int64_t n, bool settled);
  // Up to max tokens continuing history, whose last token the target has
  // not run yet and whose earlier positions it has observed.
  std::vector<int32_t> propose(const std::vector<int32_t>& history, int max);

  struct Request {
    MtpProposer* proposer = nullptr;                 // one per sequence, all on the same engine
    const std::vector<int32_t>* history = nullptr;  // as for propose()
    int max = 0;
  };
  // Drafts for several sequences at once (the server's decoding requests):
  // their catch-up rows share forwards, then each draft position is one
  // forward with a row per sequence. In order; empty where there is nothing to draft.
  static std::vector<std::vector<int32_t>> propose(LoadedModel& engine, const std::vector<Request>& requests);

 private:
  // Runs the rows whose next token is among the observed ones (all but the last observed).
  void run_settled_rows();
  int64_t have() const { return caught_ + static_cast<int64_t>(tokens_.size()); }

  LoadedModel& e_;
  int32_t seq_;
  int64_t dim_;
  int64_t caught_ = 0;           // MTP rows at positions < caught_ are built on the target's own states
  std::vector<float> pending_;   // the target's hidden states at positions caught_.., one row each
  std::vector<int32_t> tokens_;  // ...and the tokens at those positions
  std::vector<float> state_;  // the block's output at the last row drafted from
};

// The executor's proposer over MtpProposer: one per sequence, made when the
// sequence's first hidden states arrive, dropped when it is forgotten.
class MtpDrafter : public Proposer {
 public:
  // Throws Error when the engine's model has no MTP block loaded.
  explicit MtpDrafter(LoadedModel& target);
  const char* name() const override { return "mtp"; }
  bool wants_hidden() const override { return true; }
  void observe(int32_t seq, int64_t first_pos, const int32_t* tokens, const float* hidden, int64_t n,
               bool settled) override;
  std::vector<std::vector<int32_t>> propose(const std::vector<DraftRequest>& batch) override;
  void forget(int32_t seq) override { per_seq_.erase(seq); }

 private:
  MtpProposer& of(int32_t seq);
  LoadedModel& e_;
  std::unordered_map<int32_t, std::unique_ptr<MtpProposer>> per_seq_;
};

}  // namespace kestrel

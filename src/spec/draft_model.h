#pragma once
// Drafts from a smaller model sharing the target's vocabulary: it runs
// greedily on its own engine and KV cache, one draft sequence per target
// sequence, each kept in step with its target's history — the part both
// agree on stays cached, anything after it (rejected drafts) is rolled back
// before the next proposal. Its cache's blocks are allocated and rolled back
// by a scheduler of its own, as the target's are by the server's. The server drafts for all its decoding requests
// at once: their catch-up rows share forwards, then each greedy step is one
// forward with a row per request.
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "runtime/loaded_model.h"
#include "runtime/proposer.h"
#include "runtime/scheduler.h"

namespace kestrel {

class DraftModelProposer : public Proposer {
 public:
  // Throws Error when the vocabularies differ in size.
  DraftModelProposer(LoadedModel& draft, int64_t target_n_vocab);
  // Loads the draft model (options.model_path) with the target's context and
  // owns its engine; options.n_seq_max sequences fit its cache.
  static std::unique_ptr<DraftModelProposer> load(LoadOptions options, const LoadedModel& target);
  // Up to max tokens continuing history (shorter near the draft's context end), on sequence 0.
  std::vector<int32_t> propose(const std::vector<int32_t>& history, int max);
  const char* name() const override { return "draft"; }
  // Drafts for every request, in order (empty for one the draft's cache has no room for).
  std::vector<std::vector<int32_t>> propose(const std::vector<DraftRequest>& requests) override;  // each seq is also the draft's sequence
  // Frees a sequence's draft cache (its request is gone).
  void forget(int32_t seq) override;

 private:
  void sync(int32_t seq, const std::vector<int32_t>& history);

  std::unique_ptr<LoadedModel> owned_;  // set by load()
  LoadedModel& d_;
  // One request per sequence (its id is the sequence): its tokens, the ones
  // in the draft's cache, the blocks that hold them.
  Scheduler sched_;
  BatchPlacement place_;
  std::vector<float> logits_;
};

}  // namespace kestrel

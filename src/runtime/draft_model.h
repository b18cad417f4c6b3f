#pragma once
// Drafts from a smaller model sharing the target's vocabulary: it runs
// greedily on its own engine and KV cache (sequence 0), kept in step with
// the target's history — the part both agree on stays cached, anything
// after it (rejected drafts) is rolled back before the next proposal.
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/engine.h"

namespace kestrel {

class DraftModelProposer {
 public:
  // Throws Error when the vocabularies differ in size.
  DraftModelProposer(Engine& draft, int64_t target_n_vocab);
  // Loads the draft model (options.model_path) with the target's context and
  // owns its engine.
  static std::unique_ptr<DraftModelProposer> load(EngineOptions options, const Engine& target);
  // Up to max tokens continuing history (shorter near the draft's context end).
  std::vector<int32_t> propose(const std::vector<int32_t>& history, int max);

 private:
  void forward(const std::vector<int32_t>& tokens, int64_t first_pos);  // logits of the last token into logits_

  std::unique_ptr<Engine> owned_;  // set by load()
  Engine& d_;
  std::vector<int32_t> cached_;  // tokens whose keys and values are in the draft's cache, in order
  std::vector<float> logits_;
};

}  // namespace kestrel

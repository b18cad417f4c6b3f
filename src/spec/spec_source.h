#pragma once
// The proposer behind `--spec ngram|draft|mtp`, built once per target engine
// and handed to the executor: `run` (GenerationParams::proposer), `serve`
// (ServingConfig::exec.proposer) and `bench` share it.
#include <memory>
#include <string>

#include "runtime/loaded_model.h"
#include "runtime/generator.h"
#include "runtime/proposer.h"

namespace kestrel {

class SpecSource {
 public:
  // mode: ngram (prompt lookup), draft (draft_options names the draft model;
  // threads, KV types and its sequence count are taken from it) or mtp (the
  // target must be loaded with LoadOptions::load_mtp). Throws Error for
  // other modes and when the proposer cannot be built.
  SpecSource(const std::string& mode, LoadedModel& target, const LoadOptions& draft_options);
  ~SpecSource();
  // Points params.proposer at this proposer.
  void attach(GenerationParams& params) const { params.proposer = proposer_.get(); }
  Proposer* proposer() const { return proposer_.get(); }
  const std::string& mode() const { return mode_; }

 private:
  std::string mode_;
  std::unique_ptr<Proposer> proposer_;
};

}  // namespace kestrel

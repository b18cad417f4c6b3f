#pragma once
// The proposer behind `--spec ngram|draft|mtp`, built once per target engine
// and wired into a generation's parameters (run and bench share it).
#include <memory>
#include <string>

#include "spec/draft_model.h"
#include "runtime/engine.h"
#include "runtime/generator.h"
#include "spec/mtp_proposer.h"

namespace kestrel {

class SpecSource {
 public:
  // mode: ngram (prompt lookup, the generator's own), draft (draft_options
  // names the draft model; threads and KV types are taken from it) or mtp
  // (the target must be loaded with EngineOptions::load_mtp). Throws Error
  // for other modes and when the proposer cannot be built.
  SpecSource(const std::string& mode, Engine& target, const EngineOptions& draft_options);
  // Points params.draft_source and params.on_hidden at this proposer.
  void attach(GenerationParams& params) const;
  const std::string& mode() const { return mode_; }
  DraftModelProposer* draft_model() const { return draft_.get(); }  // with mode draft

 private:
  std::string mode_;
  std::unique_ptr<DraftModelProposer> draft_;
  std::unique_ptr<MtpProposer> mtp_;
};

}  // namespace kestrel

#include "spec/spec_source.h"

#include <fmt/format.h>

#include "core/error.h"
#include "spec/draft_model.h"
#include "spec/mtp_proposer.h"
#include "spec/ngram_proposer.h"

namespace kestrel {

SpecSource::SpecSource(const std::string& mode, LoadedModel& target, const LoadOptions& draft_options) : mode_(mode) {
  if (mode == "draft") {
    if (draft_options.model_path.empty()) throw Error("--spec draft needs --draft-model FILE");
    proposer_ = DraftModelProposer::load(draft_options, target);
  } else if (mode == "mtp") {
    proposer_ = std::make_unique<MtpDrafter>(target);
  } else if (mode == "ngram") {
    proposer_ = std::make_unique<NgramProposer>();
  } else {
    throw Error(fmt::format("speculation '{}' is not one of ngram, draft, mtp", mode));
  }
}

SpecSource::~SpecSource() = default;

}  // namespace kestrel

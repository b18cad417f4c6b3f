#include "spec/spec_source.h"

#include <fmt/format.h>

#include "core/error.h"

namespace kestrel {

SpecSource::SpecSource(const std::string& mode, Engine& target, const EngineOptions& draft_options) : mode_(mode) {
  if (mode == "draft") {
    if (draft_options.model_path.empty()) throw Error("--spec draft needs --draft-model FILE");
    draft_ = DraftModelProposer::load(draft_options, target);
  } else if (mode == "mtp") {
    mtp_ = std::make_unique<MtpProposer>(target);
  } else if (mode != "ngram") {
    throw Error(fmt::format("speculation '{}' is not one of ngram, draft, mtp", mode));
  }
}

void SpecSource::attach(GenerationParams& p) const {
  p.draft_source = nullptr;
  p.on_hidden = nullptr;
  if (draft_) {
    p.draft_source = [d = draft_.get()](const std::vector<int32_t>& h, int max) { return d->propose(h, max); };
  } else if (mtp_) {
    p.draft_source = [m = mtp_.get()](const std::vector<int32_t>& h, int max) { return m->propose(h, max); };
    p.on_hidden = [m = mtp_.get()](int64_t first, const int32_t* tokens, const float* hidden, int64_t n, bool settled) {
      m->observe(first, tokens, hidden, n, settled);
    };
  }
}

}  // namespace kestrel

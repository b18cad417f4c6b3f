#include "runtime/draft_model.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "runtime/batch.h"
#include "runtime/sampler.h"

namespace kestrel {

DraftModelProposer::DraftModelProposer(Engine& draft, int64_t target_n_vocab) : d_(draft) {
  const int64_t nv = d_.model->config().n_vocab;
  if (nv != target_n_vocab)
    throw Error(fmt::format("the draft model's vocabulary has {} tokens, the target's {}: they must share one", nv,
                            target_n_vocab));
  logits_.resize(static_cast<size_t>(nv));
  d_.kv->remove(0);
}

std::unique_ptr<DraftModelProposer> DraftModelProposer::load(EngineOptions options, const Engine& target) {
  options.n_ctx = target.n_ctx;
  auto engine = std::make_unique<Engine>(Engine::load(options));
  auto p = std::make_unique<DraftModelProposer>(*engine, target.model->config().n_vocab);
  p->owned_ = std::move(engine);  // the heap object d_ refers to stays where it is
  return p;
}

void DraftModelProposer::forward(const std::vector<int32_t>& tokens, int64_t first_pos) {
  const int64_t chunk = d_.model->max_batch_tokens(), n = static_cast<int64_t>(tokens.size());
  Batch b;
  for (int64_t s = 0; s < n; s += chunk) {
    b.clear();
    const int64_t e = std::min(n, s + chunk);
    for (int64_t i = s; i < e; i++) b.add(tokens[i], static_cast<int32_t>(first_pos + i), 0, i == n - 1);
    d_.model->forward(b, *d_.kv, logits_.data());
  }
}

std::vector<int32_t> DraftModelProposer::propose(const std::vector<int32_t>& history, int max) {
  const auto len = static_cast<int64_t>(history.size());
  max = static_cast<int>(std::min<int64_t>(max, d_.n_ctx - len));
  if (max <= 0 || len == 0) return {};
  // Keep what the draft cached of this history; at least the last token runs again for its logits.
  auto common = static_cast<int64_t>(
      std::mismatch(cached_.begin(), cached_.end(), history.begin(), history.end()).first - cached_.begin());
  common = std::min(common, len - 1);
  d_.kv->truncate(0, common);
  cached_.assign(history.begin(), history.begin() + common);
  forward({history.begin() + common, history.end()}, common);
  cached_ = history;
  std::vector<int32_t> draft;
  for (int i = 0; i < max; i++) {
    const int32_t t = argmax(logits_.data(), static_cast<int64_t>(logits_.size()));
    draft.push_back(t);
    if (i + 1 == max) break;
    forward({t}, len + i);
    cached_.push_back(t);
  }
  return draft;
}

}  // namespace kestrel

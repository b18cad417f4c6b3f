#include "runtime/sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace kestrel {

void SamplingParams::validate() const {
  auto bad = [](const char* name, double v, const char* range) {
    throw Error(fmt::format("{} = {} is out of range ({})", name, v, range));
  };
  if (!(temperature >= 0.0f) || temperature > 100.0f) bad("temperature", temperature, "0 to 100; 0 is greedy");
  if (top_k < 0) bad("top_k", top_k, "0 (disabled) or more");
  if (!(top_p > 0.0f && top_p <= 1.0f)) bad("top_p", top_p, "greater than 0, at most 1");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) bad("min_p", min_p, "0 to 1");
  if (!(repeat_penalty > 0.0f) || repeat_penalty > 10.0f) bad("repeat_penalty", repeat_penalty, "greater than 0, at most 10");
  if (repeat_last_n < 0) bad("repeat_last_n", repeat_last_n, "0 or more");
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) bad("frequency_penalty", frequency_penalty, "-2 to 2");
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) bad("presence_penalty", presence_penalty, "-2 to 2");
  for (const auto& [t, bias] : logit_bias)
    if (!(bias >= -100.0f && bias <= 100.0f)) bad("logit_bias", bias, "-100 to 100");
}

Sampler::Sampler(const SamplingParams& params, int64_t n_vocab) : p_(params), n_vocab_(n_vocab), rng_(params.seed) {
  p_.validate();
  cand_.reserve(static_cast<size_t>(n_vocab));
  counts_.assign(static_cast<size_t>(n_vocab), 0);
}

double Sampler::uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

void Sampler::apply_penalties(float* logits, const std::vector<int32_t>& history) {
  for (const auto& [t, bias] : p_.logit_bias)
    if (t >= 0 && t < n_vocab_) logits[t] = bias <= -100.0f ? -INFINITY : logits[t] + bias;
  if (!penalised()) return;
  const size_t n = std::min(history.size(), static_cast<size_t>(p_.repeat_last_n));
  const size_t first = history.size() - n;
  for (size_t i = first; i < history.size(); i++)
    if (history[i] >= 0 && history[i] < n_vocab_) counts_[history[i]]++;
  for (size_t i = first; i < history.size(); i++) {
    const int32_t t = history[i];
    if (t < 0 || t >= n_vocab_ || counts_[t] == 0) continue;
    float& l = logits[t];
    // As llama.cpp: divide positive logits, multiply negative ones.
    l = l <= 0.0f ? l * p_.repeat_penalty : l / p_.repeat_penalty;
    l -= static_cast<float>(counts_[t]) * p_.frequency_penalty + p_.presence_penalty;
    counts_[t] = 0;  // each distinct token is penalised once
  }
}

void Sampler::distribution(float* logits, const std::vector<int32_t>& history) {
  apply_penalties(logits, history);
  cand_.clear();
  for (int64_t i = 0; i < n_vocab_; i++) cand_.push_back({static_cast<int32_t>(i), logits[i], 0.0f});
  auto by_logit = [](const Candidate& a, const Candidate& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); };
  if (p_.top_k > 0 && p_.top_k < static_cast<int>(cand_.size())) {
    std::partial_sort(cand_.begin(), cand_.begin() + p_.top_k, cand_.end(), by_logit);
    cand_.resize(static_cast<size_t>(p_.top_k));
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  shape();
}

void Sampler::shape() {
  auto softmax = [&](float temp) {
    const float mx = cand_.front().logit;
    double sum = 0.0;
    for (auto& c : cand_) sum += (c.p = std::exp((c.logit - mx) / temp));
    for (auto& c : cand_) c.p = static_cast<float>(c.p / sum);
  };
  softmax(1.0f);
  if (p_.top_p < 1.0f) {
    double cum = 0.0;
    size_t keep = cand_.size();
    for (size_t i = 0; i < cand_.size(); i++) {
      cum += cand_[i].p;
      if (cum >= p_.top_p) { keep = i + 1; break; }
    }
    cand_.resize(keep);
  }
  if (p_.min_p > 0.0f) {
    const float threshold = cand_.front().p * p_.min_p;
    size_t keep = 1;
    while (keep < cand_.size() && cand_[keep].p >= threshold) keep++;
    cand_.resize(keep);
  }
  softmax(p_.temperature);
}

int32_t Sampler::sample(float* logits, const std::vector<int32_t>& history) {
  if (p_.temperature <= 0.0f) {
    apply_penalties(logits, history);
    return argmax(logits, n_vocab_);
  }
  distribution(logits, history);
  return draw();
}

int32_t Sampler::draw() {
  const double u = uniform();
  double cum = 0.0;
  for (const auto& c : cand_) {
    cum += c.p;
    if (u < cum) return c.id;
  }
  return cand_.back().id;
}

int Sampler::best_needed() const {
  if (!p_.logit_bias.empty() || penalised()) return -1;
  if (p_.temperature <= 0.0f) return 1;
  return p_.top_k > 0 && p_.top_k < n_vocab_ ? p_.top_k : -1;
}

int32_t Sampler::sample_best(const int32_t* ids, const float* logits, int n) {
  const int k = best_needed();
  if (k < 1 || k > n) throw Error(fmt::format("the sampler needs the {} best candidates, {} came", k, n));
  if (p_.temperature <= 0.0f) return ids[0];
  cand_.clear();
  for (int i = 0; i < k; i++) cand_.push_back({ids[i], logits[i], 0.0f});
  shape();
  return draw();
}

int32_t Sampler::sample_or_accept(float* logits, const std::vector<int32_t>& history, int32_t draft, bool& accepted) {
  if (p_.temperature <= 0.0f) {
    const int32_t tok = sample(logits, history);
    accepted = tok == draft;
    return tok;
  }
  distribution(logits, history);
  double p_draft = 0.0;
  for (const auto& c : cand_)
    if (c.id == draft) p_draft = c.p;
  accepted = uniform() < p_draft;
  if (accepted) return draft;
  // Rejected: draw from the rest, renormalised (max(p - q, 0) with q all on the draft).
  const double u = uniform() * (1.0 - p_draft);
  double cum = 0.0;
  int32_t last = -1;
  for (const auto& c : cand_) {
    if (c.id == draft) continue;
    cum += c.p;
    last = c.id;
    if (u < cum) return c.id;
  }
  return last >= 0 ? last : draft;  // the draft was the only candidate (and u fell on rounding)
}

void RawLogprobs::observe(const float* row, int64_t nv, int n_top) {
  raw_.assign(row, row + nv);
  const float m = *std::max_element(raw_.begin(), raw_.end());
  double sum = 0;
  for (float x : raw_) sum += std::exp(static_cast<double>(x - m));
  lse_ = m + static_cast<float>(std::log(sum));
  ids_.resize(static_cast<size_t>(nv));
  for (size_t i = 0; i < ids_.size(); i++) ids_[i] = static_cast<int32_t>(i);
  const auto n = std::min<size_t>(static_cast<size_t>(std::max(0, n_top)), ids_.size());
  std::partial_sort(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(n), ids_.end(),
                    [&](int32_t x, int32_t y) { return raw_[x] > raw_[y]; });
  top_.clear();
  for (size_t i = 0; i < n; i++) top_.push_back({ids_[i], raw_[ids_[i]] - lse_});
}

}  // namespace kestrel

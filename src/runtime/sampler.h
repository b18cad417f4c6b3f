#pragma once
// Turns a row of logits into the next token: penalties, then top-k, top-p,
// min-p, temperature, and a draw from a seeded generator (same seed, same
// tokens). Temperature 0 is greedy.
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "kernels/ops.h"  // argmax

namespace kestrel {

struct SamplingParams {
  float temperature = 0.8f;
  int top_k = 40;                // 0 disables
  float top_p = 0.95f;           // 1 disables
  float min_p = 0.05f;           // 0 disables
  float repeat_penalty = 1.0f;   // 1 disables
  int repeat_last_n = 64;        // tokens the penalties look back over
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  uint64_t seed = 0;
  // Added to a token's logit before anything else (OpenAI's logit_bias); -100
  // or less bans the token outright.
  std::vector<std::pair<int32_t, float>> logit_bias;

  // Throws Error naming the first out-of-range parameter.
  void validate() const;
};

class Sampler {
 public:
  Sampler(const SamplingParams& params, int64_t n_vocab);

  // logits is modified in place. history: tokens so far (prompt + generated).
  int32_t sample(float* logits, const std::vector<int32_t>& history);
  // Speculative verification of a drafted token whose proposer put all its
  // probability on it: accepted with the probability p(draft) the sampler
  // gives it here (greedy: when it is the argmax); otherwise a token drawn
  // from p with the draft removed, renormalised. The token returned is thus
  // distributed exactly as sample() would draw it. accepted says which.
  int32_t sample_or_accept(float* logits, const std::vector<int32_t>& history, int32_t draft, bool& accepted);

  const SamplingParams& params() const { return p_; }
  // Greedy with nothing that changes the logits first (penalties, biases): sample() is the row's argmax.
  bool plain_greedy() const { return best_needed() == 1 && p_.temperature <= 0.0f; }
  // How many of a row's best candidates sample() depends on alone (nothing rewrites the logits first: no
  // penalties or biases): 1 greedy, top_k when it is on; -1: the whole row.
  int best_needed() const;
  // sample() from the row's n >= best_needed() best candidates, in distribution()'s order (logit descending,
  // ties by id): ids and their logits, as a device's top-k gives them. The same token, the same draws.
  int32_t sample_best(const int32_t* ids, const float* logits, int n);

 private:
  void apply_penalties(float* logits, const std::vector<int32_t>& history);
  bool penalised() const {  // a repetition, frequency or presence penalty is on
    return p_.repeat_penalty != 1.0f || p_.frequency_penalty != 0.0f || p_.presence_penalty != 0.0f;
  }
  // Penalties, top-k, top-p, min-p and temperature: the candidates and their
  // probabilities in cand_ (temperature > 0 only).
  void distribution(float* logits, const std::vector<int32_t>& history);
  void shape();      // cand_ (ranked) -> their probabilities: softmax, top-p, min-p, temperature
  int32_t draw();    // one token from cand_
  double uniform();  // [0, 1), identical across standard libraries

  SamplingParams p_;
  int64_t n_vocab_;
  std::mt19937_64 rng_;
  struct Candidate {
    int32_t id;
    float logit;
    float p;
  };
  std::vector<Candidate> cand_;
  std::vector<int32_t> counts_;
};

// A token and its log-probability.
struct TokenChoice {
  int32_t token = 0;
  float logprob = 0;
};

// A row's log-probabilities as OpenAI reports them: the log-softmax of the
// raw logits, before penalties and temperature. observe() keeps what is
// needed before the sampler rewrites the row in place (buffers reused: no
// allocation after the first rows).
class RawLogprobs {
 public:
  void observe(const float* row, int64_t n_vocab, int n_top);
  float logprob(int32_t token) const { return raw_[static_cast<size_t>(token)] - lse_; }
  // The n_top most likely tokens, best first.
  const std::vector<TokenChoice>& top() const { return top_; }

 private:
  std::vector<float> raw_;
  std::vector<int32_t> ids_;
  std::vector<TokenChoice> top_;
  float lse_ = 0;
};

}  // namespace kestrel

// Speculative decoding with prompt-lookup drafts: the proposer, the adaptive
// draft length, the paged cache's rollback, and greedy output identical to
// plain decoding on stories260K and the llama.cpp reference models (Llama,
// Qwen2, DeepSeek's latent cache).
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "spec/draft_model.h"
#include "runtime/draft_length.h"
#include "runtime/generator.h"
#include "kv/kv_cache.h"
#include "spec/ngram_proposer.h"
#include "runtime/sampler.h"
#include "runtime/spec_governor.h"
#include "test_support.h"

namespace kestrel {
namespace {

TEST(NgramProposer, ContinuesTheMostRecentLongestMatch) {
  const NgramProposer p;
  // ... 7 8 9 | 5 7 8 9 | 6 ... then 7 8 9 again: the later "7 8 9" is followed by 6.
  const std::vector<int32_t> h = {1, 7, 8, 9, 5, 7, 8, 9, 6, 2, 7, 8, 9};
  EXPECT_EQ(p.propose(h, 3), (std::vector<int32_t>{6, 2, 7}));
  EXPECT_EQ(p.propose(h, 1), (std::vector<int32_t>{6}));
  EXPECT_TRUE(p.propose({1, 2, 3, 4}, 4).empty());  // nothing repeats
  EXPECT_TRUE(p.propose(h, 0).empty());
  // A 1-gram match when no longer one exists; the draft stops at the end of the history.
  EXPECT_EQ(p.propose({4, 5, 6, 5}, 4), (std::vector<int32_t>{6, 5}));
}

TEST(DraftLength, GrowsOnAcceptanceShrinksOnRejectionAndPausesWhenItDoesNotPay) {
  DraftLength d(8);
  EXPECT_EQ(d.next(), 4);
  d.update(4, 4);
  EXPECT_EQ(d.next(), 5);
  d.update(5, 1);
  EXPECT_EQ(d.next(), 2);
  for (int i = 0; i < 6; i++) d.update(2, 0);
  // A pause of plain decode steps, then drafting again (8 steps after a
  // stretch that had accepted something).
  auto pause = [&] {
    int plain = 0;
    while (d.next() == 0) plain++;
    return plain;
  };
  EXPECT_EQ(pause(), 8);
  // Nothing accepted since: each further pause doubles, up to 256...
  std::vector<int> pauses;
  for (int k = 0; k < 7; k++) {
    while (d.next() > 0) d.update(1, 0);  // runs until the rate falls below a quarter
    pauses.push_back(pause() + 1);          // the loop's last next() was a pause step too
  }
  EXPECT_EQ(pauses, (std::vector<int>{16, 32, 64, 128, 256, 256, 256}));
  // ...and one accepted token in a stretch brings it back to 8.
  d.update(1, 1);
  while (d.next() > 0) d.update(1, 0);
  EXPECT_EQ(pause() + 1, 8);
  EXPECT_EQ(DraftLength(0).next(), 0);
}

// The governor probes both modes and runs the faster one, then probes again.
TEST(SpecGovernor, RunsTheModeThatMeasuredFasterAndProbesAgain) {
  for (const bool spec_faster : {true, false}) {
    SpecGovernor g(4, 10);
    // A drafting step makes 3 tokens in 2 ms (faster) or in 6 ms (slower); a plain step 1 token in 1 ms.
    auto step = [&] { g.drafting() ? g.record(3, spec_faster ? 0.002 : 0.006) : g.record(1, 0.001); };
    std::vector<bool> modes;
    for (int i = 0; i < 4 + 4 + 10 + 4 + 4; i++) {
      modes.push_back(g.drafting());
      step();
    }
    for (int i = 0; i < 4; i++) EXPECT_TRUE(modes[i]) << "probe with drafts, step " << i;
    for (int i = 4; i < 8; i++) EXPECT_FALSE(modes[i]) << "probe without, step " << i;
    for (int i = 8; i < 18; i++) EXPECT_EQ(modes[i], spec_faster) << "run, step " << i;
    for (int i = 18; i < 22; i++) EXPECT_TRUE(modes[i]) << "probe again, step " << i;
    EXPECT_NEAR(g.spec_rate(), spec_faster ? 1500.0 : 500.0, 1e-6);
    EXPECT_NEAR(g.plain_rate(), 1000.0, 1e-6);
  }
}

// Rolling back rejected drafts leaves the cache as if they were never written.
TEST(PagedKvCache, TruncatingRejectedTokensEqualsNeverWritingThem) {
  auto row = [](float v) { return std::vector<float>{v, -v}; };
  PagedKvCache spec({1, 2, 2}, 8, 4), plain({1, 2, 2}, 8, 4);
  spec.reserve(0, 14);
  for (int p = 0; p < 14; p++) spec.write_k(0, spec.slot(0, p), row(p < 9 ? p : 100.0f + p).data());
  spec.truncate(0, 9);  // positions 9..13 were rejected drafts
  spec.reserve(0, 11);
  for (int p = 9; p < 11; p++) spec.write_k(0, spec.slot(0, p), row(p).data());
  plain.reserve(0, 11);
  for (int p = 0; p < 11; p++) plain.write_k(0, plain.slot(0, p), row(p).data());
  EXPECT_EQ(spec.length(0), plain.length(0));
  EXPECT_EQ(spec.n_free_blocks(), plain.n_free_blocks());
  for (int p = 0; p < 11; p++) {
    float a[2], b[2];
    spec.read_k(0, spec.slot(0, p), a);
    plain.read_k(0, plain.slot(0, p), b);
    EXPECT_EQ(a[0], b[0]) << p;
    EXPECT_EQ(a[1], b[1]) << p;
  }
  EXPECT_THROW(spec.slot(0, 11), Error);  // nothing beyond
}

// The verification rule keeps the sampler's distribution: the token returned
// for a drafted x is distributed as p itself (chi-square over 6 tokens,
// 40000 draws; 5 degrees of freedom, 20.5 is the 0.1% critical value), and x
// is accepted with probability p(x).
TEST(Speculation, AcceptOrResampleKeepsTheSamplersDistribution) {
  const std::vector<float> logits = {1.0f, 2.5f, 0.3f, 1.7f, -0.5f, 2.0f};
  SamplingParams sp;
  sp.temperature = 0.9f;
  sp.top_k = 0;
  sp.top_p = 1.0f;
  sp.min_p = 0.0f;
  sp.seed = 42;
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t i = 0; i < logits.size(); i++) sum += (p[i] = std::exp(logits[i] / sp.temperature));
  for (auto& v : p) v /= sum;
  for (const int32_t draft : {1, 4}) {  // a likely and an unlikely draft
    Sampler s(sp, static_cast<int64_t>(logits.size()));
    const int n = 40000;
    std::vector<int> counts(logits.size(), 0);
    int accepted = 0;
    for (int i = 0; i < n; i++) {
      std::vector<float> row = logits;
      bool acc = false;
      counts[static_cast<size_t>(s.sample_or_accept(row.data(), {}, draft, acc))]++;
      accepted += acc;
    }
    double chi2 = 0;
    for (size_t i = 0; i < p.size(); i++) chi2 += (counts[i] - n * p[i]) * (counts[i] - n * p[i]) / (n * p[i]);
    EXPECT_LT(chi2, 20.5) << "draft " << draft;
    EXPECT_NEAR(static_cast<double>(accepted) / n, p[static_cast<size_t>(draft)], 0.01) << "draft " << draft;
  }
}

TEST(Speculation, SamplingWithDraftsRunsAndStaysWithinTheSettings) {
  const LoadOptions o = test::shared_engine("models/stories260K.gguf", 256);
  LoadedModel e = LoadedModel::load(o);
  const auto prompt =
      e.tokenizer->encode("Once upon a time, there was a cat. Once upon a time, there was a", true, false);
  GenerationParams p;
  p.sampling.temperature = 0.8f;
  p.sampling.seed = 7;
  p.max_tokens = 100;
  p.ignore_eos = true;
  p.spec_draft_max = 6;
  NgramProposer ngram;
  p.proposer = &ngram;
  const GenerationResult a = generate(e, prompt, p), b = generate(e, prompt, p);
  EXPECT_EQ(a.tokens, b.tokens);  // same seed, same draws
  EXPECT_EQ(a.tokens.size(), 100u);
  EXPECT_GT(a.spec_drafted, 0);
  EXPECT_LE(a.spec_accepted, a.spec_drafted);
}

struct SpecCase {
  const char* model;  // in ../shared, or "synth:ARCH" (its tiny preset, float32)
  const char* prompt;
  int n;
};

TEST(Speculation, GreedyOutputIsIdenticalToPlainDecoding) {
  const SpecCase cases[] = {
      {"models/stories260K.gguf",
       "Once upon a time, there was a little girl named Lily. She liked to play with her ball. Once upon a time, "
       "there was a little girl named Lily. She",
       160},
      {"reference/llama.cpp/llama-tiny.f32.gguf", "The quick brown fox jumps over the lazy dog. The quick brown fox",
       40},
      {"reference/llama.cpp/qwen2-tiny.f32.gguf", "The quick brown fox jumps over the lazy dog. The quick brown fox",
       40},
      {"reference/llama.cpp/deepseek3-tiny.f32.gguf",
       "The quick brown fox jumps over the lazy dog. The quick brown fox", 40},
      // Sliding windows (rollback must not reach released blocks), experts, fused matrices: widened to F32
      // (below), as F16 weights meet activations rounded to F16, whose batched and one-row sums differ by
      // ~1e-3 and flip a near-tie (phi3: a top-2 gap of 0.002 at step 33).
      {"reference/compat/models/gemma2.F16.gguf", "The quick brown fox jumps over the lazy dog. The quick brown fox", 40},
      {"reference/compat/models/qwen3moe.F16.gguf", "The quick brown fox jumps over the lazy dog. The quick brown fox",
       40},
      {"reference/compat/models/phi3.F16.gguf", "The quick brown fox jumps over the lazy dog. The quick brown fox", 40},
      // Gemma 4: rejected drafts rolled back in caches that later layers read (layers 9-11 read 7 and 8's).
      {"synth:gemma4", "The quick brown fox jumps over the lazy dog. The quick brown fox", 40},
      // Linear attention: rejected drafts send the recurrent state back to its checkpoint (tiled and
      // repeat-interleaved value heads, dense and experts).
      {"synth:qwen35", "The quick brown fox jumps over the lazy dog. The quick brown fox", 40},
      {"synth:qwen3next", "The quick brown fox jumps over the lazy dog. The quick brown fox", 40},
  };
  int64_t accepted_total = 0;
  test::TempDir dir;
  for (const auto& c : cases) {
    const std::string model = c.model;
    LoadOptions o = model.rfind("synth:", 0) == 0 ? test::shared_engine("models/stories260K.gguf", 512)
                                                  : test::shared_engine(c.model, 512);
    if (model.rfind("synth:", 0) == 0)
      o.model_path = test::write_synth_preset(dir.file(model.substr(6) + ".gguf"), model.substr(6), "tiny");
    if (std::string(c.model).find(".F16.") != std::string::npos)
      o.model_path = test::widen_to_f32(o.model_path, dir.file("f32.gguf"));
    LoadedModel e = LoadedModel::load(o);
    const auto prompt = e.tokenizer->encode(c.prompt, true, false);
    GenerationParams p;
    p.max_tokens = c.n;
    p.sampling.temperature = 0.0f;
    p.ignore_eos = true;
    const GenerationResult plain = generate(e, prompt, p);
    NgramProposer ngram;
    p.proposer = &ngram;
    for (const int draft : {1, 4, 8}) {
      p.spec_draft_max = draft;
      const GenerationResult spec = generate(e, prompt, p);
      EXPECT_EQ(spec.tokens, plain.tokens) << c.model << " ngram, draft " << draft;
      EXPECT_EQ(spec.text, plain.text) << c.model << " ngram, draft " << draft;
      EXPECT_LE(spec.spec_accepted, spec.spec_drafted);
      accepted_total += spec.spec_accepted;
    }
    // Random-weight models rarely repeat themselves, so drafts also come from
    // an oracle that knows the plain output but gets every third token wrong:
    // acceptance, rejection and cache rollback on every architecture.
    test::FunctionProposer oracle_drafts([&](const std::vector<int32_t>& history, int max) {
      std::vector<int32_t> d;
      const size_t done = history.size() - prompt.size();
      for (size_t i = done; i < plain.tokens.size() && static_cast<int>(d.size()) < max; i++)
        d.push_back((i % 3 == 2) ? (plain.tokens[i] + 1) % static_cast<int32_t>(e.model->config().n_vocab)
                                 : plain.tokens[i]);
      return d;
    });
    p.proposer = &oracle_drafts;
    p.spec_draft_max = 6;
    const GenerationResult oracle = generate(e, prompt, p);
    EXPECT_EQ(oracle.tokens, plain.tokens) << c.model << " oracle drafts";
    EXPECT_GT(oracle.spec_accepted, c.n / 4) << c.model;
    EXPECT_LT(oracle.spec_accepted, oracle.spec_drafted) << c.model;  // some were rejected and rolled back
    // The governor (run/serve --spec-governed) may stop drafting when it measures slower: same tokens.
    p.spec_governed = true;
    EXPECT_EQ(generate(e, prompt, p).tokens, plain.tokens) << c.model << " governed";
    p.spec_governed = false;
    p.proposer = nullptr;
    p.spec_draft_max = 0;
  }
  EXPECT_GT(accepted_total, 20);  // stories260K's repetitive prompt gets n-gram drafts accepted
}

// A draft model: the target itself as its own draft agrees almost always
// (single-token vs batched arithmetic aside); the output stays identical,
// and the draft's cache follows the target's history through rejections.
// Bytes of KV for about two blocks of stories260K's cache.
int64_t tiny_pool_bytes(const LoadOptions& o) {
  LoadedModel probe = LoadedModel::load(o);
  return 2 * probe.kv->block_size() * probe.kv->layout().bytes_per_token();
}

TEST(Speculation, DraftModelProposals) {
  for (const char* model : {"models/stories260K.gguf", "reference/llama.cpp/llama-tiny.f32.gguf",
                            "reference/llama.cpp/qwen2-tiny.f32.gguf", "reference/llama.cpp/deepseek3-tiny.f32.gguf"}) {
    const LoadOptions o = test::shared_engine(model, 256);
    LoadedModel e = LoadedModel::load(o);
    LoadedModel d = LoadedModel::load(o);
    DraftModelProposer proposer(d, e.model->config().n_vocab);
    const auto prompt = e.tokenizer->encode("Once upon a time, there was a little dog", true, false);
    GenerationParams p;
    p.sampling.temperature = 0.0f;
    p.max_tokens = 60;
    p.ignore_eos = true;
    const GenerationResult plain = generate(e, prompt, p);
    p.spec_draft_max = 5;
    p.proposer = &proposer;
    const GenerationResult spec = generate(e, prompt, p);
    EXPECT_EQ(spec.tokens, plain.tokens) << model;
    EXPECT_GT(spec.spec_accepted, spec.spec_drafted * 9 / 10) << model;
    // The draft proposes what the target would say next, given any history.
    std::vector<int32_t> h = prompt;
    h.insert(h.end(), plain.tokens.begin(), plain.tokens.begin() + 10);
    const auto next = proposer.propose(h, 3);
    EXPECT_EQ(next, std::vector<int32_t>(plain.tokens.begin() + 10, plain.tokens.begin() + 13)) << model;
  }
  LoadOptions o;
  o.model_path = test::shared("models/stories260K.gguf");
  LoadedModel small = LoadedModel::load(o);
  EXPECT_THROW(DraftModelProposer(small, 32000), Error);  // another vocabulary

  // A draft whose own KV pool is full drafts nothing for that request (an
  // answer from its ledger, not an exception) and still drafts for one that fits.
  LoadOptions tiny = test::shared_engine("models/stories260K.gguf", 256);
  tiny.kv_cache_bytes = tiny_pool_bytes(tiny);
  LoadedModel d = LoadedModel::load(tiny);
  ASSERT_LE(d.kv->n_blocks(), 3);
  DraftModelProposer proposer(d, d.model->config().n_vocab);
  std::vector<int32_t> long_history(100, 5), short_history = {1, 403, 407};
  std::vector<std::vector<int32_t>> drafts;
  ASSERT_NO_THROW(drafts = proposer.propose({{1, &long_history, 4}, {2, &short_history, 4}}));
  EXPECT_TRUE(drafts[0].empty());
  EXPECT_EQ(drafts[1].size(), 4u);
}

TEST(Speculation, StopConditionsStillHoldAndBadSettingsAreRefused) {
  const LoadOptions o = test::shared_engine("models/stories260K.gguf", 64);
  LoadedModel e = LoadedModel::load(o);
  const auto prompt = e.tokenizer->encode("Once upon a time, Once upon a time, Once upon a time,", true, false);
  GenerationParams p;
  p.sampling.temperature = 0.0f;
  p.ignore_eos = true;
  p.max_tokens = 500;  // the context (64) ends it
  NgramProposer ngram;
  p.proposer = &ngram;
  p.spec_draft_max = 8;
  const GenerationResult spec = generate(e, prompt, p);
  p.spec_draft_max = 0;
  const GenerationResult plain = generate(e, prompt, p);
  EXPECT_EQ(spec.stop_reason, "context");
  EXPECT_EQ(spec.tokens, plain.tokens);
  p.max_tokens = 7;
  p.spec_draft_max = 8;
  EXPECT_EQ(generate(e, prompt, p).tokens.size(), 7u);
  p.spec_draft_max = 65;
  EXPECT_THROW(generate(e, prompt, p), Error);
  p.spec_draft_max = 4;
  p.proposer = nullptr;  // drafts from nowhere: refused, not silently plain
  EXPECT_THROW(generate(e, prompt, p), Error);
}

}  // namespace
}  // namespace kestrel

// Perplexity by llama.cpp's method against llama.cpp's own figures for
// stories260K on ../shared/eval/stories.txt (see ../shared/README.md):
// n_ctx 128: 20 chunks, PPL 5.1168 ± 0.2638; n_ctx 64: 40 chunks, 5.3328 ± 0.2792.
#include <gtest/gtest.h>

#include "core/error.h"
#include "runtime/perplexity.h"
#include "test_support.h"

namespace kestrel {
namespace {

TEST(Perplexity, MatchesLlamaCppOnStories260K) {
  EngineOptions o;
  o.model_path = test::shared("models/stories260K.gguf");
  o.n_threads = 2;
  o.n_ctx = 128;
  Engine e = Engine::load(o);
  const std::string text = test::read_text(test::shared("eval/stories.txt"));
  const PerplexityResult a = perplexity(e, text, 128);
  EXPECT_EQ(a.n_chunks, 20);
  EXPECT_NEAR(a.ppl, 5.1168, 5e-4);
  EXPECT_NEAR(a.ppl_err, 0.2638, 5e-3);
  ASSERT_EQ(a.running.size(), 20u);
  EXPECT_DOUBLE_EQ(a.running.back(), a.ppl);
  const PerplexityResult b = perplexity(e, text, 64);
  EXPECT_EQ(b.n_chunks, 40);
  EXPECT_NEAR(b.ppl, 5.3328, 5e-4);
  EXPECT_NEAR(b.ppl_err, 0.2792, 5e-3);
  EXPECT_THROW(perplexity(e, "Once", 64), Error);  // shorter than a chunk
  EXPECT_THROW(perplexity(e, text, 256), Error);   // beyond the engine's context
}

}  // namespace
}  // namespace kestrel

// What ends a generation, as llama.cpp decides it: EOS, EOT, EOM and the
// families' end-of-turn markers by their spelling, whether or not the file
// names them (the compat files of ../shared: Llama 3.2 names only
// <|end_of_text|> as EOS, yet a chat turn ends at <|eot_id|>).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gguf/gguf_writer.h"
#include "runtime/generator.h"
#include "test_support.h"

namespace kestrel {
namespace {

std::vector<int32_t> eog_of(const std::string& cell) {
  auto file = open_model_file(test::compat_model(cell), "");
  return Vocab::from_gguf(*file).end_of_generation;
}

TEST(EndOfGeneration, TheFamiliesEndOfTurnMarkersCountAsLlamaCppCountsThem) {
  EXPECT_THAT(eog_of("llama32.F16"), ::testing::ElementsAre(1001, 1004));  // <|end_of_text|>, <|eot_id|>
  EXPECT_THAT(eog_of("qwen25.F16"), ::testing::ElementsAre(1000, 1002));   // <|endoftext|>, <|im_end|>
  EXPECT_THAT(eog_of("phi3.F16"), ::testing::ElementsAre(512, 519));       // <|endoftext|>, <|end|>
  EXPECT_THAT(eog_of("gemma2.F16"), ::testing::Contains(2));
}

// o200k_harmony (gpt-oss): <|return|> and <|call|> end the reply; <|end|> only closes a message (the analysis
// before the answer), as llama.cpp drops it when all three are there. Without them <|end|> ends (Phi-3).
TEST(EndOfGeneration, HarmonysEndClosesAMessageNotTheReply) {
  test::TempDir dir;
  auto eog = [&](const std::vector<std::string>& specials) {
    std::vector<std::string> tokens = {"a", "b"};
    tokens.insert(tokens.end(), specials.begin(), specials.end());
    GgufWriter w;
    w.set_str("general.architecture", "gpt-oss");
    w.set_str("tokenizer.ggml.model", "gpt2");
    w.set("tokenizer.ggml.tokens", GgufValue::strings(tokens));
    w.set("tokenizer.ggml.merges", GgufValue::strings({"a b"}));
    w.set_u32("tokenizer.ggml.eos_token_id", 2);
    w.write_file(dir.file("v.gguf"));
    return Vocab::from_gguf(GgufFile::open(dir.file("v.gguf"))).end_of_generation;
  };
  EXPECT_THAT(eog({"<|return|>", "<|call|>", "<|end|>"}), ::testing::ElementsAre(2, 3));
  EXPECT_THAT(eog({"<|return|>", "<|end|>"}), ::testing::ElementsAre(2, 3));
}

TEST(EndOfGeneration, AGeneratedEotEndsTheReplyUnlessEosIsIgnored) {
  LoadOptions o;
  o.model_path = test::compat_model("llama32.F16");
  o.n_threads = 2;
  o.n_ctx = 64;
  LoadedModel e = LoadedModel::load(o);
  GenerationParams p;
  p.max_tokens = 8;
  p.sampling.temperature = 0;
  p.sampling.logit_bias = {{1004, 100.0f}};  // <|eot_id|> always wins
  const std::vector<int32_t> prompt = e.tokenizer->encode("Hello", true, false);
  const GenerationResult r = generate(e, prompt, p);
  EXPECT_EQ(r.stop_reason, "eos");
  EXPECT_TRUE(r.tokens.empty());
  p.ignore_eos = true;
  EXPECT_EQ(generate(e, prompt, p).tokens.size(), 8u);
}

}  // namespace
}  // namespace kestrel

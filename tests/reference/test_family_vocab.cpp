// The tokenizer flags of the compat families' vocabularies, as llama.cpp
// reads them: SentencePiece with and without the dummy space prefix (Gemma
// writes add_space_prefix false), byte fallback, BOS per the file (or the
// pre-tokenizer's default), EOS when asked, and control tokens only parsed
// when asked (a user's "<｜begin▁of▁sentence｜>" stays text).
#include <gmock/gmock.h>

#include "gguf/gguf_writer.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

std::unique_ptr<Tokenizer> tokenizer_of(const std::string& cell) {
  const GgufFile f = GgufFile::open(test::compat_model(cell));
  return Tokenizer::from_gguf(f);
}

TEST(FamilyVocab, GemmaAddsNoDummyPrefixWhereLlamaStyleSpmDoes) {
  const auto gemma = tokenizer_of("gemma2.F16"), phi = tokenizer_of("phi3.F16");  // the same 512 pieces
  const std::string text = "Once upon a time";
  const auto g = gemma->encode(text, false, false), p = phi->encode(text, false, false);
  ASSERT_FALSE(g.empty());
  ASSERT_FALSE(p.empty());
  const std::string kSpace = "\xE2\x96\x81";
  EXPECT_NE(gemma->vocab().tokens[g[0]].rfind(kSpace, 0), 0u) << gemma->vocab().tokens[g[0]];
  EXPECT_EQ(phi->vocab().tokens[p[0]].rfind(kSpace, 0), 0u) << phi->vocab().tokens[p[0]];
  EXPECT_NE(g, p);
  EXPECT_EQ(gemma->decode(g), text);
  EXPECT_EQ(phi->decode(p), " " + text);  // the dummy prefix decodes as the space it is
}

TEST(FamilyVocab, CharactersWithoutAPieceFallBackToBytes) {
  const auto gemma = tokenizer_of("gemma2.F16");
  const std::string text = "\xE4\xBD\xA0\xF0\x9F\x98\x80";  // "你😀": no pieces for them in this vocabulary
  std::vector<int32_t> bytes;
  for (unsigned char c : text) bytes.push_back(3 + c);  // <0x00> is id 3
  EXPECT_EQ(gemma->encode(text, false, false), bytes);
  EXPECT_EQ(gemma->decode(bytes), text);
}

TEST(FamilyVocab, BosAndEosFollowTheFile) {
  EXPECT_EQ(tokenizer_of("r1qwen.F16")->encode("Hi", true, false).front(), 1003);   // add_bos_token true
  EXPECT_EQ(tokenizer_of("llama32.F16")->encode("Hi", true, false).front(), 1000);  // Llama 3's BOS
  const auto qwen = tokenizer_of("qwen25.F16")->encode("Hi", true, false);          // add_bos_token false
  EXPECT_THAT(qwen, ::testing::Not(::testing::Contains(1000)));
  // add_eos_token true appends EOS; a llama-bpe file without add_bos_token gets BOS (llama.cpp's default).
  const GgufFile f = GgufFile::open(test::compat_model("llama32.F16"));
  GgufWriter w;
  for (const auto& [k, v] : f.metadata())
    if (k != "tokenizer.ggml.add_bos_token") w.set(k, v);
  w.set_bool("tokenizer.ggml.add_eos_token", true);
  test::TempDir dir;
  w.write_file(dir.file("eos.gguf"));
  const auto ids = Tokenizer::from_gguf(GgufFile::open(dir.file("eos.gguf")))->encode("Hi", true, false);
  EXPECT_EQ(ids.front(), 1000);
  EXPECT_EQ(ids.back(), 1001);
}

TEST(FamilyVocab, ControlTokenTextIsParsedOnlyWhenAsked) {
  const auto r1 = tokenizer_of("r1qwen.F16");
  const std::string bos = "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
  EXPECT_EQ(r1->encode(bos + "Hi", false, true).front(), 1003);
  const auto plain = r1->encode(bos + "Hi", false, false);
  EXPECT_THAT(plain, ::testing::Not(::testing::Contains(1003)));
  EXPECT_EQ(r1->decode(plain), bos + "Hi");
}

}  // namespace
}  // namespace kestrel

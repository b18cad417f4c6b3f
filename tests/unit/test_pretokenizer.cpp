// Pre-tokenizer rule sets not covered by ../shared/vocab (llama3, qwen2,
// deepseek-v3): splits worked out by hand from the models' tokenizer.json regexes.
#include <gmock/gmock.h>

#include "core/error.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/utf8.h"

namespace kestrel {
namespace {

std::vector<std::string> split(const std::string& pre, const std::string& text) {
  std::vector<std::string> out;
  for (auto piece : PreTokenizer(pre).split(text)) out.emplace_back(piece);
  return out;
}

using V = std::vector<std::string>;

TEST(PreTokenizer, Llama3GroupsDigitsByThreeAndKeepsContractions) {
  EXPECT_EQ(split("llama3", "Hello world 12345!!\n\n"), (V{"Hello", " world", " ", "123", "45", "!!\n\n"}));
  EXPECT_EQ(split("llama-bpe", "I'M here"), (V{"I", "'M", " here"}));
}

TEST(PreTokenizer, Qwen2SplitsEveryDigit) {
  EXPECT_EQ(split("qwen2", "abc 2024"), (V{"abc", " ", "2", "0", "2", "4"}));
}

TEST(PreTokenizer, DeepSeekV3SplitsDigitsThenCjkThenWords) {
  EXPECT_EQ(split("deepseek-v3", "Hello world 12345"), (V{"Hello", " world", " ", "123", "45"}));
  EXPECT_EQ(split("deepseek-v3", "\xE4\xBD\xA0\xE5\xA5\xBD, x"),  // "你好, x"
            (V{"\xE4\xBD\xA0\xE5\xA5\xBD", ",", " x"}));
}

TEST(PreTokenizer, PiecesAlwaysCoverTheText) {
  const std::string text = "  mixed\tspace\r\n and \xFF invalid \xC3 bytes 42\n";
  for (const auto& name : PreTokenizer::known_names()) {
    std::string joined;
    for (const auto& p : split(name, text)) joined += p;
    EXPECT_EQ(joined, text) << name;
  }
}

TEST(PreTokenizer, UnknownRuleSetIsNamed) {
  try {
    PreTokenizer p("klingon");
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("'klingon' is not supported"));
  }
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {

// Well-formed UTF-8 (Unicode's table 3-7): /tokenize's with_pieces gives a piece as text only when it is.
TEST(Utf8, ValidIsWellFormedThroughout) {
  for (const char* ok : {"", "plain", "caf\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "\xF4\x8F\xBF\xBF"})
    EXPECT_TRUE(utf8_valid(ok)) << ok;
  for (const char* bad : {"\x80", "a\xBF", "\xC3", "\xE2\x82", "\xC0\xAF", "\xC1\xBF", "\xE0\x80\x80",
                          "\xED\xA0\x80", "\xF0\x80\x80\x80", "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\xFF"})
    EXPECT_FALSE(utf8_valid(bad)) << bad;
}

}  // namespace
}  // namespace kestrel

// Pre-tokenizer rule sets not covered by ../shared/vocab (llama3, qwen2,
// deepseek-v3): splits worked out by hand from the models' tokenizer.json regexes.
#include <gmock/gmock.h>

#include "core/error.h"
#include "tokenizer/pretokenizer.h"

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

// Every pre-tokenizer rule set of the families Kestrel runs against an
// independent oracle: the public tokenizer.json regexes evaluated by
// Python's third-party `regex` module (tests/tokenizer/pretokenizer_oracle.py),
// on text that exercises what the rules disagree about — contractions in
// both cases, digit runs, camel case, marks, CJK, scripts with no case,
// emoji, every kind of whitespace and newline.
#include <gmock/gmock.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/pretokenizer.h"
#include "test_support.h"

namespace kestrel {
namespace {

const std::vector<std::string>& texts() {
  static const std::vector<std::string> t = {
      "Hello world! It's a test: don't stop, WE'RE HERE and y'all'd've gone.",
      "I'M SHOUTING. You'Re mixed. 'tis 'S alone.",
      "Numbers: 1 12 123 1234 12345 3.14159 1,000,000 -42 0x1F 2024-11-30",
      "camelCase PascalCase HTTPServer getHTTPResponseCode iOS eBay XMLHttpRequest",
      "caf\xC3\xA9 cafe\xCC\x81 na\xC3\xAF" "ve r\xC3\xA9sum\xC3\xA9 \xC3\x9C" "ber stra\xC3\x9F" "e",  // precomposed and combining marks
      "\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C\xEF\xBC\x8C\xE4\xBB\x8A\xE5\xA4\xA9 2024 \xE5\xB9\xB4",  // 你好世界，今天 2024 年
      "\xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF \xE3\x82\xAB\xE3\x82\xBF\xE3\x82\xAB\xE3\x83\x8A "
      "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4",  // こんにちは カタカナ 한국어
      "\xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7 \xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87 "
      "\xCE\x93\xCE\xB5\xCE\xB9\xCE\xAC \xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82",  // Arabic, Hindi, Greek, Russian
      "emoji \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD and \xE2\x9D\xA4\xEF\xB8\x8F!",
      "  leading, trailing  \n\nlines\r\nwindows\rold\tand\ttabs \t \n  \n",
      "nbsp\xC2\xA0space ideographic\xE3\x80\x80space line\xE2\x80\xA8sep",
      "code: for (int i = 0; i < n; i++) { x[i] += y[i] * 2; } // done\n    return x;",
      "path/to/file.txt a/b//c https://example.com/a?b=c&d=e#f",
      "$100 + 50% = ~150^2 | a<=b>=c `tick` @user #tag",
      "...!!!?\?\?---___===+++",  // (escaped: "??-" is a trigraph)
      "",
      " ",
      "'",
      "'s",
      "x'",
  };
  return t;
}

TEST(PreTokenizerOracle, EveryRuleSetSplitsAsThePublicRegexesDo) {
  const std::vector<std::string> names = {"gpt-2",     "starcoder", "refact", "command-r",        "smollm",
                                          "falcon",    "llama-bpe", "llama3", "qwen2",            "deepseek-r1-qwen",
                                          "qwen35",    "gpt-4o",    "tekken", "deepseek-v3",      "deepseek-coder",
                                          "glm4",      "chatglm-bpe"};
  test::TempDir dir;
  nlohmann::json in;
  for (const auto& n : names) in[n] = texts();
  test::write_bytes(dir.file("in.json"), in.dump());
  const std::string cmd = std::string(KESTREL_PYTHON3) + " " + KESTREL_SOURCE_DIR +
                          "/tests/tokenizer/pretokenizer_oracle.py " + dir.file("in.json") + " " + dir.file("out.json");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const auto want = test::read_json(dir.file("out.json"));
  for (const auto& n : names) {
    const PreTokenizer pre(n);
    for (size_t i = 0; i < texts().size(); i++) {
      std::vector<std::string> got;
      for (auto p : pre.split(texts()[i])) got.emplace_back(p);
      EXPECT_EQ(got, want[n][i].get<std::vector<std::string>>()) << n << ", text " << i << ": " << texts()[i];
    }
  }
}

TEST(PreTokenizerOracle, UnknownNamesStayAClearError) {
  EXPECT_THROW(PreTokenizer("no-such-pre-tokenizer"), Error);
  EXPECT_TRUE(PreTokenizer::adds_bos_by_default("llama-bpe"));
  EXPECT_TRUE(PreTokenizer::adds_bos_by_default("tekken"));
  EXPECT_FALSE(PreTokenizer::adds_bos_by_default("qwen2"));
  EXPECT_TRUE(PreTokenizer::never_adds_bos("glm4"));  // llama.cpp: no BOS whatever add_bos_token says
  EXPECT_FALSE(PreTokenizer::never_adds_bos("llama-bpe"));
}

}  // namespace
}  // namespace kestrel

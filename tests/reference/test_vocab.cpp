// Tokenizers against llama.cpp's tokenizer test vectors (Hugging Face
// reference output, no BOS, special-token text parsed as plain text).
#include "gguf/gguf.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

std::vector<std::string> split_inputs(const std::string& text) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t at; (at = text.find(sep, start)) != std::string::npos; start = at + sep.size()) out.push_back(text.substr(start, at - start));
  return out;
}

std::vector<std::vector<int32_t>> read_expected(const std::string& path) {
  std::vector<std::vector<int32_t>> out;
  std::istringstream in(test::read_text(path));
  std::string line;
  while (std::getline(in, line)) {
    std::vector<int32_t> ids;
    std::istringstream ls(line);
    int32_t id;
    while (ls >> id) ids.push_back(id);
    out.push_back(ids);
  }
  return out;
}

class VocabFamily : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabFamily, EveryVectorMatches) {
  const std::string base = test::shared("vocab/ggml-vocab-" + GetParam() + ".gguf");
  const GgufFile f = GgufFile::open(base);
  const auto tok = Tokenizer::from_gguf(f);
  const auto inputs = split_inputs(test::read_text(base + ".inp"));
  const auto expected = read_expected(base + ".out");
  ASSERT_GT(inputs.size(), 20u);
  ASSERT_EQ(inputs.size(), expected.size());
  int failures = 0;
  for (size_t i = 0; i < inputs.size(); i++) {
    const auto got = tok->encode(inputs[i], false, false);
    EXPECT_EQ(got, expected[i]) << "input " << i << ": '" << inputs[i] << "'";
    failures += got != expected[i];
    // The bound the server refuses long prompts by, before tokenizing: no
    // token stands for more than max_token_text_bytes() bytes of input (checked
    // against the reference's token counts, not only ours).
    EXPECT_GE(expected[i].size() * tok->max_token_text_bytes(), inputs[i].size()) << "input " << i;
    // Decoding the ids gives the text back (byte-level BPE is lossless; SPM
    // adds the dummy-prefix space, which the caller strips).
    std::string text = tok->decode(got);
    if (tok->vocab().kind == Vocab::Kind::Spm && !text.empty() && text[0] == ' ') text.erase(0, 1);
    EXPECT_EQ(text, inputs[i]) << "round trip of input " << i;
  }
  RecordProperty("failures", failures);
  // Runs of what merges best (spaces, repeated punctuation) stay within it too.
  for (const std::string& run : {std::string(4000, ' '), std::string(4000, '='), std::string(4000, 'a')})
    EXPECT_GE(tok->encode(run, false, false).size() * tok->max_token_text_bytes(), run.size());
}

INSTANTIATE_TEST_SUITE_P(Families, VocabFamily,
                         ::testing::Values("llama-spm", "gpt-2", "deepseek-llm", "deepseek-coder"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& ch : n) if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace kestrel

// Tokenizers against llama.cpp's tokenizer test vectors (Hugging Face
// reference output, no BOS, special-token text parsed as plain text).
#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
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

// This year's families' pre-tokenizers (gpt-4o / llama4, tekken, glm4, qwen35) against llama.cpp's own regex
// engine: GPT-2's vocabulary with its tokenizer.ggml.pre replaced by each (no vocabulary of theirs is at hand;
// GPT-2's merges cross word, digit and space boundaries, so the splits decide the ids), on GPT-2's test inputs
// and extra texts (cases, digits, contractions, whitespace, scripts, emoji, code). tests/compat/pretok_cells.py
// records llama.cpp's ids.
TEST(VocabPreTokenizers, ThisYearsRuleSetsSplitAsLlamaCppsOnGpt2sVocabulary) {
  const auto doc = nlohmann::json::parse(test::read_text(std::string(KESTREL_SOURCE_DIR) + "/tests/reference/pretok_cells.json"));
  const std::string base = test::shared(doc["vocab"].get<std::string>());
  const GgufFile gpt2 = GgufFile::open(base);
  std::vector<std::string> texts = split_inputs(test::read_text(base + ".inp"));
  for (const auto& t : doc["extra"]) texts.push_back(t.get<std::string>());
  test::TempDir dir;
  int differing = 0;  // texts whose ids differ from GPT-2's own rules' (the cells test something)
  const auto gpt2_tok = Tokenizer::from_gguf(gpt2);
  for (const auto& [pre, ids] : doc["ids"].items()) {
    GgufWriter w;
    for (const auto& [key, value] : gpt2.metadata()) w.set(key, value);
    w.set_str("tokenizer.ggml.pre", pre);
    const std::string path = dir.file(pre + ".gguf");
    w.write_file(path);
    const GgufFile f = GgufFile::open(path);
    const auto tok = Tokenizer::from_gguf(f);
    ASSERT_EQ(ids.size(), texts.size()) << pre;
    for (size_t i = 0; i < texts.size(); i++) {
      const auto want = ids[i].get<std::vector<int32_t>>();
      const auto got = tok->encode(texts[i], false, false);
      EXPECT_EQ(got, want) << pre << ": '" << texts[i] << "'";
      differing += want != gpt2_tok->encode(texts[i], false, false);
    }
  }
  EXPECT_GT(differing, 30);
}

// Vocabularies ../shared does not hold, on llama.cpp's test vectors for them (Hugging Face's ids), each reduced
// to what its vectors use (tests/compat/reduced_vocab.py says why the ids stay the same): Gemma 4's tokenizer
// model ("gemma4": BPE on raw UTF-8, spaces as U+2581, runs of newlines apart and whole where they are a token,
// <0xXX> bytes, BOS always) and Qwen3.5's pre-tokenizer (qwen35: marks stay with their letters).
GgufFile write_reduced_vocab(const nlohmann::json& doc, const std::string& path) {
  GgufWriter w;
  w.set_str("general.architecture", "llama");
  w.set_str("tokenizer.ggml.model", doc["model"].get<std::string>());
  if (!doc["pre"].get<std::string>().empty()) w.set_str("tokenizer.ggml.pre", doc["pre"].get<std::string>());
  w.set("tokenizer.ggml.tokens", GgufValue::strings(doc["tokens"].get<std::vector<std::string>>()));
  w.set("tokenizer.ggml.token_type", GgufValue::int32s(doc["types"].get<std::vector<int32_t>>()));
  w.set("tokenizer.ggml.merges", GgufValue::strings(doc["merges"].get<std::vector<std::string>>()));
  if (doc["bos"].get<int>() >= 0) w.set_u32("tokenizer.ggml.bos_token_id", doc["bos"].get<uint32_t>());
  if (doc["eos"].get<int>() >= 0) w.set_u32("tokenizer.ggml.eos_token_id", doc["eos"].get<uint32_t>());
  w.set_bool("tokenizer.ggml.add_bos_token", false);  // (llama.cpp adds it for Gemma 4 all the same)
  w.write_file(path);
  return GgufFile::open(path);
}

class ReducedVocab : public ::testing::TestWithParam<std::string> {};

TEST_P(ReducedVocab, LlamaCppsVectorsGiveHuggingFacesIds) {
  const auto doc = nlohmann::json::parse(
      test::read_text(std::string(KESTREL_SOURCE_DIR) + "/tests/reference/vocab_" + GetParam() + ".json"));
  test::TempDir dir;
  const GgufFile f = write_reduced_vocab(doc, dir.file("vocab.gguf"));
  const auto tok = Tokenizer::from_gguf(f);
  ASSERT_GT(doc["cases"].size(), 40u);
  for (const auto& c : doc["cases"]) {
    const std::string text = c["text"];
    const auto want = c["ids"].get<std::vector<int32_t>>();
    const auto got = tok->encode(text, false, false);
    EXPECT_EQ(got, want) << "'" << text << "'";
    EXPECT_EQ(tok->decode(got), text) << "round trip";
  }
  if (GetParam() != "gemma-4") return;
  // BOS whatever add_bos_token says; a byte without a token of its own as <0xXX> (U+00E9 has none here).
  const auto with_bos = tok->encode("Hello", true, false);
  ASSERT_FALSE(with_bos.empty());
  EXPECT_EQ(with_bos[0], doc["bos"].get<int32_t>());
  const auto bytes = tok->encode("\xc3\xa9", false, false);
  ASSERT_EQ(bytes.size(), 2u);
  EXPECT_EQ(tok->vocab().tokens[bytes[0]], "<0xC3>");
  EXPECT_EQ(tok->vocab().tokens[bytes[1]], "<0xA9>");
  // Gemma 4 ends a turn with <turn|> and a tool call with <|tool_response>: both end generation.
  for (const char* marker : {"<turn|>", "<|tool_response>"}) {
    const int32_t id = tok->vocab().find(marker);
    ASSERT_GE(id, 0) << marker;
    EXPECT_TRUE(tok->vocab().is_end_of_generation(id)) << marker;
  }
}

INSTANTIATE_TEST_SUITE_P(LlamaCppRelease, ReducedVocab, ::testing::Values("gemma-4", "qwen35"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& ch : n) if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace kestrel

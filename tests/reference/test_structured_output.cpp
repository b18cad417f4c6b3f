// Constrained decoding against an independent validator: every schema of
// tests/grammar/schema_corpus.json, several seeds each, sampled at
// temperature 1 from a random-weight model (so the grammar, not the model,
// is what keeps the output in shape); every output must end by itself and
// validate with Python's jsonschema (Debian's python3-jsonschema). The
// corpus's deliberately invalid instances must fail the same validator, or
// the check proves nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_process.h"
#include "grammar/grammar_source.h"
#include "runtime/generator.h"
#include "test_support.h"

namespace kestrel {

using ojson = nlohmann::ordered_json;

namespace {
using ::testing::HasSubstr;

struct Validation {
  int exit_code;
  std::string report;
};

Validation validate(const ojson& cases, const std::string& path) {
  test::write_bytes(path, cases.dump());
  const std::string cmd = std::string(KESTREL_PYTHON3) + " " + KESTREL_SOURCE_DIR +
                          "/tests/grammar/validate_outputs.py " + test::shell_quote(path) + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// A random-weight model with the stories vocabulary and room for long outputs.
std::string synth_model(const test::TempDir& dir) { return test::write_synth_stories_model(dir.file("synth.gguf")); }

TEST(StructuredOutput, EverySchemaOfTheCorpusValidatesOverSeeds) {
  const ojson corpus =
      ojson::parse(test::read_text(std::string(KESTREL_SOURCE_DIR) + "/tests/grammar/schema_corpus.json"));
  ASSERT_GE(corpus.size(), 20u);
  test::TempDir dir;
  LoadOptions o;
  o.model_path = synth_model(dir);
  o.n_threads = 2;
  LoadedModel e = LoadedModel::load(o);
  // Random weights spread the probability over hundreds of tokens: a string
  // would run for the whole context before drawing its closing quote. The
  // closing characters are favoured (where the grammar allows them at all),
  // so outputs end; which values, keys and branches come is still random.
  std::vector<std::pair<int32_t, float>> bias;
  for (int32_t t = 0; t < e.tokenizer->vocab().size(); t++) {
    std::string piece = e.tokenizer->token_to_piece(t);
    if (!piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    if (piece == "\"" || piece == "}" || piece == "]") bias.emplace_back(t, 6.0f);
  }
  ASSERT_FALSE(bias.empty());
  const std::vector<int32_t> prompt = e.tokenizer->encode("Answer in JSON:", true, false);

  ojson outputs = ojson::array(), invalid = ojson::array();
  int ended_by_grammar = 0;
  for (const ojson& c : corpus) {
    const std::string name = c["name"].get<std::string>();
    GenerationParams p;
    p.grammar = compile_json_schema(c["schema"], name);
    p.max_tokens = 1800;
    p.sampling.temperature = 1.0f;
    p.sampling.top_k = 0;
    p.sampling.top_p = 1.0f;
    p.sampling.min_p = 0.0f;
    p.sampling.logit_bias = bias;
    for (uint64_t seed = 1; seed <= 4; seed++) {
      p.sampling.seed = seed;
      const GenerationResult r = generate(e, prompt, p);
      EXPECT_EQ(r.stop_reason, "eos") << name << " seed " << seed << ": " << r.text;
      ended_by_grammar += r.stop_reason == "eos";
      outputs.push_back({{"name", fmt::format("{} (seed {})", name, seed)}, {"schema", c["schema"]}, {"output", r.text}});
    }
    invalid.push_back({{"name", name}, {"schema", c["schema"]}, {"output", c["invalid"].dump()}});
  }
  const Validation good = validate(outputs, dir.file("outputs.json"));
  EXPECT_EQ(good.exit_code, 0) << good.report;
  EXPECT_THAT(good.report, HasSubstr(fmt::format("{0} of {0} valid", outputs.size())));
  EXPECT_EQ(ended_by_grammar, static_cast<int>(outputs.size()));
  // The same validator refuses every deliberately invalid instance.
  const Validation bad = validate(invalid, dir.file("invalid.json"));
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(bad.report, HasSubstr(fmt::format("0 of {} valid", invalid.size()))) << bad.report;
}

}  // namespace
}  // namespace kestrel

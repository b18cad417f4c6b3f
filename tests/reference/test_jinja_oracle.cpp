// Kestrel's Jinja interpreter against Python's jinja2 (Debian's python3-jinja2,
// set up as transformers sets it up: tests/jinja/jinja_oracle.py) on a corpus
// of snippets covering the syntax, filters, tests, methods and errors chat
// templates use (tests/jinja/oracle_corpus.json).
#include <gtest/gtest.h>

#include <cstdlib>

#include "jinja/json_value.h"
#include "jinja/template.h"
#include "test_support.h"

namespace kestrel {

using ojson = nlohmann::ordered_json;

namespace {

TEST(JinjaOracle, EverySnippetRendersAsPythonsJinja2RendersIt) {
  test::TempDir dir;
  const std::string corpus = std::string(KESTREL_SOURCE_DIR) + "/tests/jinja/oracle_corpus.json";
  const std::string cmd = std::string(KESTREL_PYTHON3) + " " + KESTREL_SOURCE_DIR + "/tests/jinja/jinja_oracle.py " +
                          corpus + " " + dir.file("out.json");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "the oracle failed (is python3-jinja2 installed? scripts/setup.sh)";
  const ojson cases = ojson::parse(test::read_text(corpus));
  const ojson expected = ojson::parse(test::read_text(dir.file("out.json")));
  ASSERT_EQ(cases.size(), expected.size());
  ASSERT_GE(cases.size(), 80u);
  jinja::RenderOptions options;
  options.now = jinja::parse_wall_time("2026-01-15T10:30:00");
  int errors_expected = 0;
  for (size_t i = 0; i < cases.size(); i++) {
    const std::string source = cases[i]["template"].get<std::string>();
    jinja::ValueDict vars;
    for (const auto& [k, v] : cases[i]["vars"].items()) vars.emplace_back(k, jinja::from_json(v, false));
    std::string ours, error;
    bool raised = false;
    try {
      ours = jinja::Template(source).render(vars, options).text;
    } catch (const jinja::TemplateError& e) {
      error = e.what();
      raised = e.raised;
    }
    if (expected[i].contains("output")) {
      EXPECT_EQ(error, "") << "case " << i << ": " << source;
      EXPECT_EQ(ours, expected[i]["output"].get<std::string>()) << "case " << i << ": " << source;
    } else {
      errors_expected++;
      const std::string theirs = expected[i]["error"].get<std::string>();
      EXPECT_NE(error, "") << "case " << i << " rendered '" << ours << "' where jinja2 refused: " << theirs;
      // raise_exception's message is the template's own words: exactly the same.
      if (theirs.rfind("TemplateRaised: ", 0) == 0) {
        EXPECT_TRUE(raised) << "case " << i;
        EXPECT_EQ("TemplateRaised: " + error, theirs) << "case " << i;
      }
    }
  }
  EXPECT_GE(errors_expected, 8);  // the corpus keeps its refusal cases
}

}  // namespace
}  // namespace kestrel

// The Jinja interpreter's own guarantees, beyond matching jinja2 (that is
// tests/reference/test_jinja_oracle.cpp): the sandbox's limits, which bytes
// are marked as the caller's, and errors that name their line.
#include <gtest/gtest.h>

#include "jinja/builtins.h"
#include "jinja/template.h"

namespace kestrel::jinja {
namespace {

std::string render(const std::string& src, const ValueDict& vars = {}, const RenderOptions& o = {}) {
  return Template(src).render(vars, o).text;
}

std::string error_of(const std::string& src, const RenderOptions& o = {}) {
  try {
    render(src, {}, o);
  } catch (const TemplateError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Jinja, LimitsStopRunawayTemplates) {
  RenderOptions o;
  o.limits.max_steps = 10000;
  o.limits.max_output_bytes = 1 << 16;
  o.limits.max_call_depth = 20;
  EXPECT_NE(error_of("{% for i in range(100000000) %}{% endfor %}", o).find("10000 loop iterations"), std::string::npos);
  EXPECT_NE(error_of("{% for i in range(200) %}{% for j in range(200) %}{% endfor %}{% endfor %}", o).find("iterations"),
            std::string::npos);
  EXPECT_NE(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", o).find("deeper than 20"), std::string::npos);
  EXPECT_NE(error_of("{% for i in range(1000) %}{{ 'x' * 100 }}{% endfor %}", o).find("output exceeds 65536"),
            std::string::npos);
  // A value doubled in a loop is stopped at the limit, not at the machine's memory.
  EXPECT_NE(error_of("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", o)
                .find("exceeds"),
            std::string::npos);
  EXPECT_NE(error_of("{{ 'x' * 100000000000 }}", o).find("exceeds"), std::string::npos);
  o.limits.max_steps = 100'000'000;
  o.limits.max_list_items = 1000;
  EXPECT_NE(error_of("{{ range(5000) | length }}", o).find("exceeds 1000 items"), std::string::npos);
  EXPECT_NE(error_of("{{ ([1] * 100000000000) | length }}", o).find("exceeds 1000 items"), std::string::npos);
  // Within the limits the same constructs run.
  EXPECT_EQ(render("{% for i in range(3) %}{{ i }}{% endfor %}", {}, o), "012");
}

TEST(Jinja, CallerTextStaysMarkedThroughConcatenationSlicingAndStripping) {
  const ValueDict vars = {{"user", Value(derived("  <|im_end|>hi  ", true))}, {"name", Value("bob")}};
  const TaintedString out = Template("A{{ user | trim }}B{{ name }}{{ ('[' + user.strip()[2:] + ']') }}").render(vars);
  EXPECT_EQ(out.text, "A<|im_end|>hiBbob[im_end|>hi]");
  std::string marked;
  for (const auto& s : out.input) marked += out.text.substr(s.begin, s.end - s.begin) + "|";
  EXPECT_EQ(marked, "<|im_end|>hi|im_end|>hi|");
  // Text computed from caller text (replace, tojson) is all the caller's.
  const TaintedString r = Template("{{ user.replace('hi', '<|im_start|>') }}|{{ [user] | tojson }}").render(vars);
  ASSERT_EQ(r.input.size(), 2u);
  EXPECT_EQ(r.text.substr(r.input[0].begin, r.input[0].end - r.input[0].begin), "  <|im_end|><|im_start|>  ");
}

TEST(Jinja, ErrorsNameTheirLine) {
  EXPECT_EQ(error_of("a\nb\n{% if x %}\n{% endfor %}"), "line 4: unexpected 'endfor' (the open block ends with 'endif')");
  EXPECT_NE(error_of("line1\n{{ x | nope }}").find("line 2: no filter named 'nope'"), std::string::npos);
  EXPECT_NE(error_of("{{ x is nope }}").find("no test named 'nope'"), std::string::npos);
  EXPECT_NE(error_of("{% include 'other.j2' %}").find("'include'"), std::string::npos);
  EXPECT_NE(error_of("{{ 'unterminated }}").find("line 1"), std::string::npos);
  EXPECT_NE(error_of("{% if x %}never closed").find("endif"), std::string::npos);
  EXPECT_NE(error_of("{% break %}").find("outside a loop"), std::string::npos);
  EXPECT_EQ(error_of("{{ missing.attr }}"), "'missing' is undefined");
}

TEST(Jinja, RaiseExceptionCarriesTheTemplatesWordsAndIsFlagged) {
  try {
    render("{{ raise_exception('Only user and assistant roles are supported!') }}");
    FAIL();
  } catch (const TemplateError& e) {
    EXPECT_TRUE(e.raised);
    EXPECT_STREQ(e.what(), "Only user and assistant roles are supported!");
  }
}

TEST(Jinja, PythonFloatRepr) {
  EXPECT_EQ(python_float_repr(1.0), "1.0");
  EXPECT_EQ(python_float_repr(0.1), "0.1");
  EXPECT_EQ(python_float_repr(1e-5), "1e-05");
  EXPECT_EQ(python_float_repr(0.0001), "0.0001");
  EXPECT_EQ(python_float_repr(1e16), "1e+16");
  EXPECT_EQ(python_float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(python_float_repr(-2.5e-10), "-2.5e-10");
  EXPECT_EQ(python_float_repr(123456789012345678.0), "1.2345678901234568e+17");
  EXPECT_EQ(python_float_repr(-0.0), "-0.0");
}

TEST(Jinja, StrftimeNowUsesTheFixedTimeWhenGiven) {
  RenderOptions o;
  o.now = parse_wall_time("2026-01-15T10:30:00");
  EXPECT_EQ(render("{{ strftime_now('%d %b %Y %a %H:%M') }}", {}, o), "15 Jan 2026 Thu 10:30");
  EXPECT_THROW(parse_wall_time("yesterday"), Error);
}

}  // namespace
}  // namespace kestrel::jinja

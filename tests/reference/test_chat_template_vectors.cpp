// Every case of ../shared/templates (24 real chat templates, 284
// conversations, rendered by Python's jinja2 as transformers sets it up:
// cases.json for the first 20, cases-2026.json for DeepSeek-V3.2, DeepSeek-V4,
// Qwen3.5 and Gemma 4) rendered byte for byte — through the library and
// through `kestrel template`.
#include <gtest/gtest.h>

#include "cli_process.h"
#include "jinja/json_value.h"
#include "test_support.h"
#include "chat/chat_template.h"
#include "chat/tool_calls.h"

namespace kestrel {

using ojson = nlohmann::ordered_json;

namespace {

struct Case {
  std::string template_name, template_file, case_name;
  ojson vars;
  std::optional<std::string> expected, expected_error;
};

std::vector<Case> load_cases(std::string& fixed_now) {
  std::vector<Case> cases;
  for (const char* file : {"templates/cases.json", "templates/cases-2026.json"}) {
    const ojson doc = ojson::parse(test::read_text(test::shared(file)));
    const std::string now = doc["fixed_now"].get<std::string>();
    EXPECT_TRUE(fixed_now.empty() || fixed_now == now) << file << " renders at another time";
    fixed_now = now;
    for (const auto& t : doc["templates"])
      for (const auto& c : t["cases"]) {
        Case x{t["name"], test::shared("templates/" + t["file"].get<std::string>()), c["name"], c["vars"], {}, {}};
        if (c.contains("expected")) x.expected = c["expected"].get<std::string>();
        if (c.contains("expected_error")) x.expected_error = c["expected_error"].get<std::string>();
        cases.push_back(std::move(x));
      }
  }
  return cases;
}

TEST(ChatTemplateVectors, EveryCaseMatchesThroughTheLibrary) {
  std::string now;
  const auto cases = load_cases(now);
  ASSERT_EQ(cases.size(), 284u);
  jinja::RenderOptions options;
  options.now = jinja::parse_wall_time(now);
  std::map<std::string, std::unique_ptr<ChatTemplate>> templates;
  int matched = 0;
  for (const auto& c : cases) {
    auto& t = templates[c.template_file];
    if (!t) t = std::make_unique<ChatTemplate>(c.template_name, test::read_text(c.template_file));
    const std::string where = c.template_name + " / " + c.case_name;
    try {
      const std::string out = t->render_vars(c.vars, options).text;
      ASSERT_TRUE(c.expected.has_value()) << where << ": rendered where the template should refuse";
      EXPECT_EQ(out, *c.expected) << where;
      matched += out == *c.expected;
    } catch (const jinja::TemplateError& e) {
      ASSERT_TRUE(c.expected_error.has_value()) << where << ": " << e.what();
      EXPECT_TRUE(e.raised) << where;
      EXPECT_EQ(std::string(e.what()), *c.expected_error) << where;
      matched += e.what() == *c.expected_error;
    }
  }
  EXPECT_EQ(matched, 284);
}

TEST(ChatTemplateVectors, EveryCaseMatchesThroughKestrelTemplate) {
  std::string now;
  const auto cases = load_cases(now);
  test::TempDir dir;
  int matched = 0;
  for (const auto& c : cases) {
    test::write_bytes(dir.file("vars.json"), c.vars.dump());
    const auto r = test::run_kestrel({"template", "--template", c.template_file, "--vars", dir.file("vars.json"), "--now", now});
    const std::string where = c.template_name + " / " + c.case_name;
    if (c.expected) {
      EXPECT_EQ(r.exit_code, 0) << where << ": " << r.err;
      EXPECT_EQ(r.out, *c.expected) << where;  // exactly: nothing added, not even a newline
      matched += r.exit_code == 0 && r.out == *c.expected;
    } else {
      EXPECT_NE(r.exit_code, 0) << where;
      EXPECT_EQ(r.err, "error: " + *c.expected_error + "\n") << where;
      matched += r.exit_code != 0 && r.err == "error: " + *c.expected_error + "\n";
    }
  }
  EXPECT_EQ(matched, 284);
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {

// The tool-call format read from each real template's own markers.
TEST(ChatTemplateVectors, ToolCallFormatOfEachRealTemplate) {
  const std::map<std::string, ToolCallFormat> expected = {
      {"Qwen-Qwen2.5-7B-Instruct", ToolCallFormat::Hermes},
      {"Qwen-Qwen3-0.6B", ToolCallFormat::Hermes},
      {"Qwen-QwQ-32B", ToolCallFormat::Hermes},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", ToolCallFormat::Hermes},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", ToolCallFormat::DeepSeek},
      {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B", ToolCallFormat::DeepSeek},
      {"deepseek-ai-DeepSeek-V3.1", ToolCallFormat::DeepSeek},
      {"deepseek-ai-DeepSeek-V3.2", ToolCallFormat::Dsml},
      {"deepseek-ai-DeepSeek-V4", ToolCallFormat::Dsml},
      {"meta-llama-Llama-3.1-8B-Instruct", ToolCallFormat::Llama3Json},
      {"meta-llama-Llama-3.2-3B-Instruct", ToolCallFormat::Llama3Json},
      {"mistralai-Mistral-Nemo-Instruct-2407", ToolCallFormat::Mistral},
      {"Mistral-Small-3.2-24B-Instruct-2506", ToolCallFormat::Mistral},
      {"google-gemma-2-2b-it", ToolCallFormat::None},
      {"google-gemma-4-31B-it", ToolCallFormat::Gemma4},
      {"Qwen3.5-4B", ToolCallFormat::QwenXml},
      {"microsoft-Phi-3.5-mini-instruct", ToolCallFormat::None},
  };
  for (const auto& [name, format] : expected) {
    const ChatTemplate t(name, test::read_text(test::shared("templates/" + name + ".jinja")));
    EXPECT_EQ(tool_call_format_name(t.tool_format()), std::string(tool_call_format_name(format))) << name;
  }
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {

// DeepSeek-V3.2's and V4's own templates write an assistant turn's calls in DSML; the parser reads back the
// same names and arguments (strings as written, everything else through JSON) — with the arguments given as
// a dict and as a JSON string (the template's from_json).
TEST(ChatTemplateVectors, DsmlCallsRenderedByTheTemplatesReadBack) {
  const ojson args = {{"city", "São \"Paulo\"\n<b>"},
                      {"days", 3},
                      {"ratio", 0.25},
                      {"hourly", false},
                      {"units", {"C", nullptr}},
                      {"where", {{"lat", -23.5}, {"tags", ojson::array()}}}};
  for (const char* name : {"deepseek-ai-DeepSeek-V3.2", "deepseek-ai-DeepSeek-V4"})
    for (bool as_string : {false, true}) {
      const ChatTemplate t(name, test::read_text(test::shared(std::string("templates/") + name + ".jinja")));
      ASSERT_EQ(t.tool_format(), ToolCallFormat::Dsml) << name;
      ojson calls = ojson::array();
      calls.push_back({{"type", "function"},
                       {"function", {{"name", "get_weather"}, {"arguments", as_string ? ojson(args.dump()) : args}}}});
      calls.push_back({{"type", "function"},
                       {"function", {{"name", "get_time"}, {"arguments", as_string ? ojson("{}") : ojson::object()}}}});
      const ojson vars = {
          {"messages", ojson::array({{{"role", "user"}, {"content", "Weather?"}},
                                     {{"role", "assistant"}, {"content", "Checking."}, {"tool_calls", calls}}})},
          {"bos_token", "<｜begin▁of▁sentence｜>"},
          {"add_generation_prompt", false}};
      const std::string text = t.render_vars(vars, {}).text;
      const size_t reply = text.find("Checking."), end = text.find("<｜end▁of▁sentence｜>", reply);
      ASSERT_NE(reply, std::string::npos) << name << ": " << text;
      ASSERT_NE(end, std::string::npos) << name << ": " << text;
      const ToolCallReply r = parse_tool_calls(ToolCallFormat::Dsml, text.substr(reply, end - reply));
      ASSERT_EQ(r.calls.size(), 2u) << name << ": " << text;
      EXPECT_EQ(r.content, "Checking.") << name;
      EXPECT_EQ(r.calls[0].name, "get_weather");
      EXPECT_EQ(ojson::parse(r.calls[0].arguments), args) << name << " as_string=" << as_string;
      EXPECT_EQ(r.calls[1].name, "get_time");
      EXPECT_EQ(ojson::parse(r.calls[1].arguments), ojson::object()) << name;
    }
}

// Gemma 4's own template writes an assistant turn's calls in its syntax (bare keys in sorted order, strings
// between <|"|>, nested values); the parser reads back the same names and arguments.
TEST(ChatTemplateVectors, Gemma4CallsRenderedByTheTemplateReadBack) {
  const ojson args = {{"city", "São \"Paulo\", SP\n<b>"},
                      {"days", 3},
                      {"ratio", 0.25},
                      {"hourly", false},
                      {"units", {"C", "F"}},
                      {"where", {{"lat", -23.5}, {"tags", ojson::array()}}}};
  for (const char* name : {"google-gemma-4-31B-it"}) {
    const ChatTemplate t(name, test::read_text(test::shared(std::string("templates/") + name + ".jinja")));
    ASSERT_EQ(t.tool_format(), ToolCallFormat::Gemma4) << name;
    ojson calls = ojson::array();
    calls.push_back({{"type", "function"}, {"function", {{"name", "get_weather"}, {"arguments", args}}}});
    calls.push_back({{"type", "function"}, {"function", {{"name", "get_time"}, {"arguments", ojson::object()}}}});
    const ojson vars = {
        {"messages", ojson::array({{{"role", "user"}, {"content", "Weather?"}},
                                   {{"role", "assistant"}, {"content", "Checking."}, {"tool_calls", calls}}})},
        {"bos_token", "<bos>"},
        {"add_generation_prompt", false}};
    const std::string text = t.render_vars(vars, {}).text;
    const size_t reply = text.find("<|turn>model\n");
    ASSERT_NE(reply, std::string::npos) << name << ": " << text;
    const ToolCallReply r = parse_tool_calls(ToolCallFormat::Gemma4, text.substr(reply + 13));
    ASSERT_EQ(r.calls.size(), 2u) << name << ": " << text;
    EXPECT_EQ(r.calls[0].name, "get_weather");
    EXPECT_EQ(nlohmann::json::parse(r.calls[0].arguments), nlohmann::json(args)) << name << ": " << text;
    EXPECT_EQ(r.calls[1].name, "get_time");
    EXPECT_EQ(ojson::parse(r.calls[1].arguments), ojson::object()) << name;
  }
}

// Qwen3.5's own template writes an assistant turn's calls as <tool_call><function=NAME><parameter=KEY>...
// (strings as they are, everything else as JSON); the parser reads back the same names and arguments.
TEST(ChatTemplateVectors, QwenXmlCallsRenderedByTheTemplateReadBack) {
  const ojson args = {{"city", "São \"Paulo\", SP\nline two"},
                      {"days", 3},
                      {"ratio", 0.25},
                      {"hourly", false},
                      {"units", {"C", "F"}},
                      {"where", {{"lat", -23.5}, {"tags", ojson::array()}}}};
  const ChatTemplate t("Qwen3.5-4B", test::read_text(test::shared("templates/Qwen3.5-4B.jinja")));
  ASSERT_EQ(t.tool_format(), ToolCallFormat::QwenXml);
  ojson calls = ojson::array();
  calls.push_back({{"type", "function"}, {"function", {{"name", "get_weather"}, {"arguments", args}}}});
  calls.push_back({{"type", "function"}, {"function", {{"name", "get_time"}, {"arguments", ojson::object()}}}});
  const ojson vars = {
      {"messages", ojson::array({{{"role", "user"}, {"content", "Weather?"}},
                                 {{"role", "assistant"}, {"content", "Checking."}, {"tool_calls", calls}}})},
      {"add_generation_prompt", false}};
  const std::string text = t.render_vars(vars, {}).text;
  const size_t reply = text.rfind("<|im_start|>assistant\n"), end = text.find("<|im_end|>", reply);
  ASSERT_NE(reply, std::string::npos) << text;
  ASSERT_NE(end, std::string::npos) << text;
  const std::string turn = text.substr(reply + 22, end - reply - 22);
  const ToolCallReply r = parse_tool_calls(ToolCallFormat::QwenXml, turn.substr(turn.find("Checking.")));
  ASSERT_EQ(r.calls.size(), 2u) << text;
  EXPECT_EQ(r.content, "Checking.");
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(ojson::parse(r.calls[0].arguments), args) << text;
  EXPECT_EQ(r.calls[1].name, "get_time");
  EXPECT_EQ(ojson::parse(r.calls[1].arguments), ojson::object()) << text;
}

TEST(ChatTemplateVectors, KestrelTemplateNamesWhatIsWrong) {
  test::TempDir dir;
  const std::string tmpl = test::shared("templates/Qwen-Qwen3-0.6B.jinja");
  auto r = test::run_kestrel({"template", "--template", tmpl, "--vars", dir.file("missing.json")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--vars file '" + dir.file("missing.json") + "' cannot be read"), std::string::npos) << r.err;
  test::write_bytes(dir.file("list.json"), "[1, 2]");
  r = test::run_kestrel({"template", "--template", tmpl, "--vars", dir.file("list.json")});
  EXPECT_NE(r.err.find("must hold a JSON object"), std::string::npos) << r.err;
  test::write_bytes(dir.file("ok.json"), R"({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": true})");
  r = test::run_kestrel({"template", "--vars", dir.file("ok.json")});
  EXPECT_NE(r.err.find("give one of -m MODEL or --template FILE"), std::string::npos) << r.err;
  r = test::run_kestrel({"template", "--template", tmpl, "--vars", dir.file("ok.json"), "--now", "soon"});
  EXPECT_NE(r.err.find("'soon' is not a time"), std::string::npos) << r.err;
  // A model without a template renders chatml, saying so on stderr only.
  r = test::run_kestrel({"template", "-m", test::shared("models/stories260K.gguf"), "--vars", dir.file("ok.json")});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_NE(r.err.find("has no chat template"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kestrel

// The built-in chat templates render each family's format; a model's template
// is chosen from its file, a named alternate, a built-in name or a file, and a
// template that does not parse is an error at load time, not a fallback.
#include <gtest/gtest.h>

#include "core/error.h"
#include "gguf/gguf_writer.h"
#include "test_support.h"
#include "chat/chat_template.h"

namespace kestrel {

using ojson = nlohmann::ordered_json;

namespace {

const ojson kChat = ojson::parse(R"([
  {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
  {"role": "assistant", "content": "<think>hmm</think>Hello!"}, {"role": "user", "content": "Bye"}])");

std::string builtin(const std::string& name, const std::string& bos = "", const std::string& eos = "") {
  return ChatTemplate("built-in " + name, builtin_chat_template(name), bos, eos)
      .render(kChat, nullptr, ojson::object(), true)
      .text;
}

TEST(ChatTemplate, EachBuiltinRendersItsFamilysFormat) {
  EXPECT_EQ(builtin("chatml"),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n<think>hmm</think>Hello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(builtin("llama3", "<|begin_of_text|>"),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n<think>hmm</think>Hello!<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(builtin("deepseek2", "", "<｜end▁of▁sentence｜>"),
            "Be brief.\n\nUser: Hi\n\nAssistant: <think>hmm</think>Hello!<｜end▁of▁sentence｜>User: Bye\n\nAssistant:");
  EXPECT_EQ(builtin("deepseek3"),
            "Be brief.<｜User｜>Hi<｜Assistant｜><think>hmm</think>Hello!<｜end▁of▁sentence｜><｜User｜>Bye<｜Assistant｜>");
  // R1 drops earlier turns' reasoning and opens its reply with <think>.
  EXPECT_EQ(builtin("deepseek-r1"),
            "Be brief.<｜User｜>Hi<｜Assistant｜>Hello!<｜end▁of▁sentence｜><｜User｜>Bye<｜Assistant｜><think>\n");
}

TEST(ChatTemplate, BuiltinsRenderToolTurns) {
  const ojson convo = ojson::parse(R"([
    {"role": "user", "content": "Rain?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
      "function": {"name": "rain", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "no"}])");
  const auto render = [&](const char* name) {
    return ChatTemplate(name, builtin_chat_template(name), "", "</s>")
        .render(convo, nullptr, ojson::object(), true)
        .text;
  };
  EXPECT_EQ(render("chatml"),
            "<|im_start|>user\nRain?<|im_end|>\n<|im_start|>assistant\n\n<tool_call>\n"
            "{\"name\": \"rain\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n"
            "<|im_start|>user\n<tool_response>\nno\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render("llama3"),
            "<|start_header_id|>user<|end_header_id|>\n\nRain?<|eot_id|><|start_header_id|>assistant<|end_header_id|>"
            "\n\n{\"name\": \"rain\", \"parameters\": {\"city\": \"Paris\"}}<|eot_id|>"
            "<|start_header_id|>ipython<|end_header_id|>\n\nno<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(render("deepseek3"),
            "<｜User｜>Rain?<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>rain\n```json\n"
            "{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>"
            "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>no<｜tool▁output▁end｜><｜tool▁outputs▁end｜><｜Assistant｜>");
  EXPECT_NO_THROW(render("deepseek2"));
  EXPECT_NO_THROW(render("deepseek-r1"));
}

TEST(ChatTemplate, MessageTextIsMarkedAsContentAndTemplateTextIsNot) {
  const RenderedChat r =
      ChatTemplate("t", builtin_chat_template("chatml")).render(kChat, nullptr, ojson::object(), true);
  std::string marked;
  for (const auto& s : r.content) marked += r.text.substr(s.begin, s.end - s.begin) + "|";
  // role names come from the request too, so they are marked; the markers are not
  EXPECT_EQ(marked, "system|Be brief.|user|Hi|assistant|<think>hmm</think>Hello!|user|Bye|");
  // Splitting a message (R1 drops reasoning) keeps the kept part marked.
  const RenderedChat r1 =
      ChatTemplate("t", builtin_chat_template("deepseek-r1")).render(kChat, nullptr, ojson::object(), true);
  std::string marked_r1;
  for (const auto& s : r1.content) marked_r1 += r1.text.substr(s.begin, s.end - s.begin) + "|";
  EXPECT_EQ(marked_r1, "Be brief.|Hi|Hello!|Bye|");
}

TEST(ChatTemplate, KwargsReachTheTemplateRequestOverDefault) {
  ChatTemplate t("t", "{{ 'on' if enable_thinking else 'off' }}|{{ extra | default('none') }}");
  EXPECT_EQ(t.render(kChat, nullptr, ojson::object(), true).text, "off|none");
  t.set_default_kwargs(ojson{{"enable_thinking", true}});
  EXPECT_EQ(t.render(kChat, nullptr, ojson::object(), true).text, "on|none");
  EXPECT_EQ(t.render(kChat, nullptr, ojson{{"enable_thinking", false}, {"extra", 3}}, true).text, "off|3");
  EXPECT_THROW(t.set_default_kwargs(ojson::array()), Error);
}

TEST(ChatTemplate, ChosenFromTheFileANamedAlternateABuiltinOrAPath) {
  test::TempDir dir;
  auto model = [&](const std::string& jinja, const std::string& tool_use = "") {
    GgufWriter w;
    w.set_str("general.architecture", "llama");
    w.set(
        "tokenizer.ggml.tokens", GgufValue::strings({"<unk>", "<s>", "</s>", "hi"}));
    w.set("tokenizer.ggml.bos_token_id", GgufValue::u32(1));
    w.set("tokenizer.ggml.eos_token_id", GgufValue::u32(2));
    if (!jinja.empty()) w.set_str("tokenizer.chat_template", jinja);
    if (!tool_use.empty()) w.set_str("tokenizer.chat_template.tool_use", tool_use);
    w.write_file(dir.file("t.gguf"));
    return GgufFile::open(dir.file("t.gguf"));
  };
  const ojson one = ojson::parse(R"([{"role": "user", "content": "x"}])");
  const auto render = [&](const ChatTemplate& t) { return t.render(one, nullptr, ojson::object(), false).text; };

  const GgufFile plain = model("");
  const ChatTemplate fallback = ChatTemplate::from_model(plain, "");
  EXPECT_TRUE(fallback.used_fallback());
  EXPECT_EQ(render(fallback), "<|im_start|>user\nx<|im_end|>\n");

  const GgufFile with = model("{{ bos_token }}[{{ messages[0].content }}]{{ eos_token }}", "tools:{{ messages | length }}");
  EXPECT_FALSE(ChatTemplate::from_model(with, "").used_fallback());
  EXPECT_EQ(render(ChatTemplate::from_model(with, "")), "<s>[x]</s>");
  EXPECT_EQ(render(ChatTemplate::from_model(with, "tool_use")), "tools:1");
  EXPECT_EQ(render(ChatTemplate::from_model(with, "deepseek3")), "<s><｜User｜>x");
  test::write_bytes(dir.file("mine.jinja"), "mine {{ messages[0].role }}\n");
  EXPECT_EQ(render(ChatTemplate::from_model(with, dir.file("mine.jinja"))), "mine user");  // trailing newline dropped
  try {
    ChatTemplate::from_model(with, "alpaca");
    FAIL() << "an unknown template name was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'alpaca'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tool_use"), std::string::npos) << e.what();
  }
}

TEST(ChatTemplate, ATemplateThatDoesNotParseIsAnErrorNamingItsLine) {
  try {
    ChatTemplate("tokenizer.chat_template", "{% for m in messages %}\n{{ m.content }\n{% endfor %}");
    FAIL() << "a broken template was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("tokenizer.chat_template"), std::string::npos) << what;
    EXPECT_NE(what.find("line 2"), std::string::npos) << what;
  }
  EXPECT_THROW(ChatTemplate("t", "{{ x | no_such_filter }}"), Error);
  EXPECT_THROW(ChatTemplate("t", "{% if x %}unclosed"), Error);
}

}  // namespace
}  // namespace kestrel

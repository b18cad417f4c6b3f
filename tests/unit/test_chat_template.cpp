// Chat messages to prompt text for each template family, written out from
// the families' published templates, and detection from the GGUF's Jinja text.
#include <gtest/gtest.h>

#include "core/error.h"
#include "gguf/gguf_writer.h"
#include "serving/chat_template.h"
#include "test_support.h"

namespace kestrel {
namespace {

const std::vector<ChatMessage> kChat = {
    {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "<think>hmm</think>Hello!"}, {"user", "Bye"}};

TEST(ChatTemplate, EachFamilyRendersItsFormat) {
  EXPECT_EQ(render_chat(ChatTemplate::ChatML, kChat),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n<think>hmm</think>Hello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(render_chat(ChatTemplate::Llama3, kChat),
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n<think>hmm</think>Hello!<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(render_chat(ChatTemplate::DeepSeek2, kChat),
            "Be brief.\n\nUser: Hi\n\nAssistant: <think>hmm</think>Hello!<｜end▁of▁sentence｜>User: Bye\n\nAssistant:");
  EXPECT_EQ(
      render_chat(ChatTemplate::DeepSeek3, kChat),
      "Be brief.<｜User｜>Hi<｜Assistant｜><think>hmm</think>Hello!<｜end▁of▁sentence｜><｜User｜>Bye<｜Assistant｜>");
  // R1 drops earlier turns' reasoning and opens its reply with <think>.
  EXPECT_EQ(render_chat(ChatTemplate::DeepSeekR1, kChat),
            "Be brief.<｜User｜>Hi<｜Assistant｜>Hello!<｜end▁of▁sentence｜><｜User｜>Bye<｜Assistant｜><think>\n");
}

TEST(ChatTemplate, DetectedFromTheGgufTemplateAndNamedOnTheCommandLine) {
  test::TempDir dir;
  auto detect = [&](const std::string& jinja) {
    GgufWriter w;
    w.set_str("general.architecture", "llama");
    if (!jinja.empty()) w.set_str("tokenizer.chat_template", jinja);
    w.write_file(dir.file("t.gguf"));
    return detect_chat_template(GgufFile::open(dir.file("t.gguf")));
  };
  EXPECT_EQ(detect(""), ChatTemplate::ChatML);
  EXPECT_EQ(detect("{% for m in messages %}<|start_header_id|>{{ m.role }}..."), ChatTemplate::Llama3);
  EXPECT_EQ(detect("{{'<｜User｜>' + content}}{{'<｜Assistant｜>'}}"), ChatTemplate::DeepSeek3);
  EXPECT_EQ(detect("{{'<｜User｜>' + content}}{{'<｜Assistant｜><think>\\n'}}"), ChatTemplate::DeepSeekR1);
  EXPECT_EQ(detect("{{ 'User: ' + content + '\\n\\n' }}{{ 'Assistant:' }}"), ChatTemplate::DeepSeek2);
  for (const char* n : {"chatml", "llama3", "deepseek2", "deepseek3", "deepseek-r1"})
    EXPECT_STREQ(chat_template_name(chat_template_from_name(n)), n);
  EXPECT_THROW(chat_template_from_name("alpaca"), Error);
}

}  // namespace
}  // namespace kestrel

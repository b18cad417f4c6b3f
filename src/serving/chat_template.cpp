#include "serving/chat_template.h"

#include <fmt/format.h>

#include "core/error.h"

namespace kestrel {

ChatTemplate chat_template_from_name(const std::string& name) {
  if (name == "chatml") return ChatTemplate::ChatML;
  if (name == "llama3") return ChatTemplate::Llama3;
  if (name == "deepseek2") return ChatTemplate::DeepSeek2;
  if (name == "deepseek3") return ChatTemplate::DeepSeek3;
  if (name == "deepseek-r1") return ChatTemplate::DeepSeekR1;
  throw Error(
      fmt::format("--chat-template '{}' is not one of chatml, llama3, deepseek2, deepseek3, deepseek-r1", name));
}

const char* chat_template_name(ChatTemplate t) {
  switch (t) {
    case ChatTemplate::ChatML:
      return "chatml";
    case ChatTemplate::Llama3:
      return "llama3";
    case ChatTemplate::DeepSeek2:
      return "deepseek2";
    case ChatTemplate::DeepSeek3:
      return "deepseek3";
    case ChatTemplate::DeepSeekR1:
      return "deepseek-r1";
  }
  return "?";
}

ChatTemplate detect_chat_template(const GgufFile& f) {
  const std::string t = f.get_string("tokenizer.chat_template").value_or("");
  if (t.find("<｜Assistant｜>") != std::string::npos)
    return t.find("<think>") != std::string::npos ? ChatTemplate::DeepSeekR1 : ChatTemplate::DeepSeek3;
  if (t.find("<|start_header_id|>") != std::string::npos) return ChatTemplate::Llama3;
  if (t.find("Assistant:") != std::string::npos && t.find("User:") != std::string::npos) return ChatTemplate::DeepSeek2;
  return ChatTemplate::ChatML;
}

namespace {
// Template text and message content, appended in order; content spans recorded.
struct Builder {
  RenderedChat r;
  Builder& tmpl(std::string_view s) {
    r.text += s;
    return *this;
  }
  Builder& content(std::string_view s) {
    if (!s.empty()) r.content.push_back({r.text.size(), r.text.size() + s.size()});
    r.text += s;
    return *this;
  }
};
}  // namespace

RenderedChat render_chat_marked(ChatTemplate t, const std::vector<ChatMessage>& messages) {
  Builder b;
  switch (t) {
    case ChatTemplate::ChatML:
      for (const auto& m : messages) b.tmpl("<|im_start|>").tmpl(m.role).tmpl("\n").content(m.content).tmpl("<|im_end|>\n");
      b.tmpl("<|im_start|>assistant\n");
      break;
    case ChatTemplate::Llama3:
      for (const auto& m : messages)
        b.tmpl("<|start_header_id|>").tmpl(m.role).tmpl("<|end_header_id|>\n\n").content(m.content).tmpl("<|eot_id|>");
      b.tmpl("<|start_header_id|>assistant<|end_header_id|>\n\n");
      break;
    case ChatTemplate::DeepSeek2:
      for (const auto& m : messages) {
        if (m.role == "system")
          b.content(m.content).tmpl("\n\n");
        else if (m.role == "user")
          b.tmpl("User: ").content(m.content).tmpl("\n\n");
        else
          b.tmpl("Assistant: ").content(m.content).tmpl("<｜end▁of▁sentence｜>");
      }
      b.tmpl("Assistant:");
      break;
    case ChatTemplate::DeepSeek3:
    case ChatTemplate::DeepSeekR1:
      for (const auto& m : messages) {
        if (m.role == "system") {
          b.content(m.content);
        } else if (m.role == "user") {
          b.tmpl("<｜User｜>").content(m.content);
        } else {
          // R1 drops the reasoning of earlier turns from the history.
          std::string_view c = m.content;
          if (t == ChatTemplate::DeepSeekR1)
            if (const auto end = c.find("</think>"); end != std::string_view::npos) c = c.substr(end + 8);
          b.tmpl("<｜Assistant｜>").content(c).tmpl("<｜end▁of▁sentence｜>");
        }
      }
      b.tmpl(t == ChatTemplate::DeepSeekR1 ? "<｜Assistant｜><think>\n" : "<｜Assistant｜>");
      break;
  }
  return std::move(b.r);
}

std::string render_chat(ChatTemplate t, const std::vector<ChatMessage>& messages) {
  return render_chat_marked(t, messages).text;
}

}  // namespace kestrel

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

std::string render_chat(ChatTemplate t, const std::vector<ChatMessage>& messages) {
  std::string out;
  switch (t) {
    case ChatTemplate::ChatML:
      for (const auto& m : messages) out += fmt::format("<|im_start|>{}\n{}<|im_end|>\n", m.role, m.content);
      return out + "<|im_start|>assistant\n";
    case ChatTemplate::Llama3:
      for (const auto& m : messages)
        out += fmt::format("<|start_header_id|>{}<|end_header_id|>\n\n{}<|eot_id|>", m.role, m.content);
      return out + "<|start_header_id|>assistant<|end_header_id|>\n\n";
    case ChatTemplate::DeepSeek2:
      for (const auto& m : messages) {
        if (m.role == "system")
          out += m.content + "\n\n";
        else if (m.role == "user")
          out += fmt::format("User: {}\n\n", m.content);
        else
          out += fmt::format("Assistant: {}<｜end▁of▁sentence｜>", m.content);
      }
      return out + "Assistant:";
    case ChatTemplate::DeepSeek3:
    case ChatTemplate::DeepSeekR1:
      for (const auto& m : messages) {
        if (m.role == "system")
          out += m.content;
        else if (m.role == "user")
          out += "<｜User｜>" + m.content;
        else {
          // R1 drops the reasoning of earlier turns from the history.
          std::string c = m.content;
          if (t == ChatTemplate::DeepSeekR1)
            if (const auto end = c.find("</think>"); end != std::string::npos) c = c.substr(end + 8);
          out += "<｜Assistant｜>" + c + "<｜end▁of▁sentence｜>";
        }
      }
      return out + (t == ChatTemplate::DeepSeekR1 ? "<｜Assistant｜><think>\n" : "<｜Assistant｜>");
  }
  return out;
}

}  // namespace kestrel

#pragma once
// Chat messages to prompt text, for the template families Kestrel knows:
// the GGUF's tokenizer.chat_template (Jinja) is recognised by its markers,
// not executed. --chat-template NAME overrides the choice.
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {

struct ChatMessage {
  std::string role;  // system, user, assistant
  std::string content;
};

enum class ChatTemplate {
  ChatML,      // <|im_start|>role\n...<|im_end|>   (Qwen2, many fine-tunes; the default)
  Llama3,      // <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
  DeepSeek2,   // "User: ...\n\nAssistant: ..." (DeepSeek-V2/V2.5 chat, DeepSeek-LLM)
  DeepSeek3,   // <｜User｜>...<｜Assistant｜>...  (DeepSeek-V3)
  DeepSeekR1,  // as DeepSeek3, the reply opening with "<think>\n"
};

// From --chat-template (chatml, llama3, deepseek2, deepseek3, deepseek-r1);
// throws Error naming the unknown name.
ChatTemplate chat_template_from_name(const std::string& name);
const char* chat_template_name(ChatTemplate t);
// The family of the file's tokenizer.chat_template (ChatML when absent or unknown).
ChatTemplate detect_chat_template(const GgufFile& file);

// The prompt for the assistant's next reply. BOS is not included: the
// tokenizer adds it where the vocabulary asks for it.
std::string render_chat(ChatTemplate t, const std::vector<ChatMessage>& messages);

// The same text, with the spans that came from message content: tokenized
// with control tokens recognised only outside them (a user's "</s>" or
// DeepSeek turn marker stays text; the template's own markers do not).
struct RenderedChat {
  std::string text;
  std::vector<TextSpan> content;
};
RenderedChat render_chat_marked(ChatTemplate t, const std::vector<ChatMessage>& messages);

}  // namespace kestrel

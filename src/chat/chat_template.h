#pragma once
// A model's chat template: the Jinja source in the GGUF's
// tokenizer.chat_template (or a named alternate, a file, or a built-in),
// rendered by Kestrel's own Jinja interpreter with the variables Hugging Face
// transformers passes (messages, tools, add_generation_prompt, bos_token,
// eos_token, and template switches such as enable_thinking).
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "chat/reasoning.h"
#include "chat/tool_calls.h"
#include "gguf/gguf.h"
#include "jinja/template.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {

// The prompt text, with the spans that came from the caller's data (message
// content, tool definitions): tokenized with control tokens recognised only
// outside them, so a user's "<|im_end|>" stays text while the template's own
// markers are control tokens.
struct RenderedChat {
  std::string text;
  std::vector<TextSpan> content;
};

class ChatTemplate {
 public:
  // Throws Error naming `origin` when the source does not parse.
  ChatTemplate(std::string origin, std::string_view source, std::string bos_token = "", std::string eos_token = "");

  // The template a model is served with. `choice`: empty for the file's
  // tokenizer.chat_template (chatml when the file has none, see
  // used_fallback()); a built-in name (chatml, llama3, deepseek2, deepseek3,
  // deepseek-r1); the name of a template in the file
  // (tokenizer.chat_template.NAME); or a path to a Jinja file.
  // bos_token/eos_token are the model's token texts.
  static ChatTemplate from_model(const GgufFile& file, const std::string& choice);

  // Where the source came from, for the start-up log ("tokenizer.chat_template").
  const std::string& origin() const { return origin_; }
  bool used_fallback() const { return fallback_; }
  // The Jinja source (Ollama's /api/show lists it).
  const std::string& source() const { return source_; }
  // The rendering's token ids: control tokens recognised only outside the
  // caller's text (everywhere with special_in_content), and no second BOS
  // when the template writes the BOS text itself (Llama 3, DeepSeek).
  std::vector<int32_t> tokenize(const Tokenizer& tokenizer, const RenderedChat& rendered, bool special_in_content) const;
  // Whether the rendering begins with the BOS text (then tokenize adds no BOS of its own).
  bool bos_in_text(const RenderedChat& rendered) const { return !bos_.empty() && rendered.text.rfind(bos_, 0) == 0; }
  // The template writes or strips <think> blocks (DeepSeek-R1 and its distills, QwQ, Qwen3).
  bool reasons() const { return reasons_; }
  // The tags it writes reasoning between (<think>, or Mistral's [THINK]).
  ReasoningTags reasoning_tags() const { return reasoning_tags_; }
  // The format the template writes tool calls in (None: it shows none).
  ToolCallFormat tool_format() const { return tool_format_; }

  // Whether the template reads this variable (e.g. reasoning_effort: gpt-oss, DeepSeek-V4).
  bool reads(std::string_view variable) const { return template_->reads(variable); }
  // Variables every render gets unless the request sets them (--chat-template-kwargs).
  void set_default_kwargs(const nlohmann::ordered_json& kwargs);

  // Renders with exactly these variables (bos_token and eos_token added when
  // absent). Throws jinja::TemplateError.
  jinja::TaintedString render_vars(const nlohmann::ordered_json& vars, const jinja::RenderOptions& options = {}) const;

  // A conversation from a client: every string in messages and tools is the
  // caller's data. `kwargs` (chat_template_kwargs of the request) are added
  // over the defaults. Throws jinja::TemplateError.
  RenderedChat render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                      const nlohmann::ordered_json& kwargs, bool add_generation_prompt) const;

 private:
  std::string origin_;
  std::string source_;
  std::shared_ptr<const jinja::Template> template_;
  std::string bos_, eos_;
  nlohmann::ordered_json default_kwargs_ = nlohmann::ordered_json::object();
  bool fallback_ = false;
  bool reasons_ = false;
  ReasoningTags reasoning_tags_;
  ToolCallFormat tool_format_ = ToolCallFormat::None;
};

// The Jinja source of a built-in template, or nullptr.
const char* builtin_chat_template(const std::string& name);
// "chatml, llama3, ..." for messages.
const char* builtin_chat_template_names();

}  // namespace kestrel

#include "chat/chat_template.h"

#include <fmt/format.h>

#include <filesystem>

#include "core/read_file.h"
#include "jinja/json_value.h"

namespace kestrel {
namespace {

// Templates for models whose file carries none (or to override one), in the
// shape of the families' published templates.
struct BuiltinTemplate {
  const char* name;
  const char* source;
};
// Tool turns: an assistant's calls are written as Hermes-style <tool_call>
// JSON (what ChatML-family models are tuned on), tool results in the
// family's tool turn; content may be null in a turn that only calls tools.
constexpr BuiltinTemplate kBuiltins[] = {
    {"chatml",
     "{%- if tools -%}{{ '<|im_start|>system\\n' }}{% if messages[0].role == 'system' %}{{ messages[0].content + '\\n\\n' }}{% endif %}"
     "{{ '# Tools\\n\\nYou may call one or more functions. Function signatures are within <tools></tools>:\\n<tools>' }}"
     "{%- for tool in tools -%}{{ '\\n' + (tool | tojson) }}{%- endfor -%}"
     "{{ '\\n</tools>\\n\\nFor each call, return a JSON object with the function name and arguments within "
     "<tool_call></tool_call> tags:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\\n</tool_call>"
     "<|im_end|>\\n' }}{%- endif -%}"
     "{%- for message in messages -%}"
     "{%- if tools and loop.first and message.role == 'system' -%}"
     "{%- elif message.role == 'assistant' and message.tool_calls is defined -%}"
     "{{ '<|im_start|>assistant\\n' + (message.content or '') }}"
     "{%- for tc in message.tool_calls -%}{{ '\\n<tool_call>\\n{\"name\": \"' + tc.function.name + '\", \"arguments\": ' + "
     "(tc.function.arguments | tojson) + '}\\n</tool_call>' }}{%- endfor -%}{{ '<|im_end|>\\n' }}"
     "{%- elif message.role == 'tool' -%}"
     "{{ '<|im_start|>user\\n<tool_response>\\n' + (message.content or '') + '\\n</tool_response><|im_end|>\\n' }}"
     "{%- else -%}{{ '<|im_start|>' + message.role + '\\n' + (message.content or '') + '<|im_end|>\\n' }}{%- endif -%}"
     "{%- endfor -%}{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"},
    {"llama3",
     "{{- bos_token -}}{%- for message in messages -%}"
     "{%- set role = 'ipython' if message.role == 'tool' else message.role -%}"
     "{{ '<|start_header_id|>' + role + '<|end_header_id|>\\n\\n' + (message.content or '') | trim }}"
     "{%- if message.tool_calls is defined -%}{%- for tc in message.tool_calls -%}"
     "{{ '{\"name\": \"' + tc.function.name + '\", \"parameters\": ' + (tc.function.arguments | tojson) + '}' }}"
     "{%- endfor -%}{%- endif -%}{{ '<|eot_id|>' }}"
     "{%- endfor -%}{%- if add_generation_prompt -%}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif -%}"},
    {"deepseek2",
     "{{- bos_token -}}{%- for message in messages -%}{%- if message.role == 'system' -%}{{ message.content + '\\n\\n' }}"
     "{%- elif message.role == 'user' -%}{{ 'User: ' + message.content + '\\n\\n' }}"
     "{%- elif message.role == 'tool' -%}{{ 'Tool: ' + (message.content or '') + '\\n\\n' }}"
     "{%- else -%}{{ 'Assistant: ' + (message.content or '') }}"
     "{%- if message.tool_calls is defined -%}{{ message.tool_calls | map(attribute='function') | list | tojson }}{%- endif -%}"
     "{{ eos_token }}{%- endif -%}{%- endfor -%}"
     "{%- if add_generation_prompt -%}{{ 'Assistant:' }}{%- endif -%}"},
    {"deepseek3",
     "{{- bos_token -}}{%- for message in messages -%}{%- if message.role == 'system' -%}{{ message.content }}"
     "{%- elif message.role == 'user' -%}{{ '<｜User｜>' + message.content }}"
     "{%- elif message.role == 'tool' -%}{{ '<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + (message.content or '') + "
     "'<｜tool▁output▁end｜><｜tool▁outputs▁end｜>' }}"
     "{%- else -%}{{ '<｜Assistant｜>' + (message.content or '') }}"
     "{%- if message.tool_calls is defined -%}{{ '<｜tool▁calls▁begin｜>' }}{%- for tc in message.tool_calls -%}"
     "{{ '<｜tool▁call▁begin｜>function<｜tool▁sep｜>' + tc.function.name + '\\n```json\\n' + (tc.function.arguments | tojson) + "
     "'\\n```<｜tool▁call▁end｜>' }}{%- endfor -%}{{ '<｜tool▁calls▁end｜>' }}{%- endif -%}"
     "{{ '<｜end▁of▁sentence｜>' }}{%- endif -%}{%- endfor -%}"
     "{%- if add_generation_prompt -%}{{ '<｜Assistant｜>' }}{%- endif -%}"},
    {"deepseek-r1",
     "{{- bos_token -}}{%- for message in messages -%}{%- if message.role == 'system' -%}{{ message.content }}"
     "{%- elif message.role == 'user' -%}{{ '<｜User｜>' + message.content }}"
     "{%- elif message.role == 'tool' -%}{{ '<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + (message.content or '') + "
     "'<｜tool▁output▁end｜><｜tool▁outputs▁end｜>' }}"
     "{%- else -%}{%- set content = message.content or '' -%}{%- if '</think>' in content -%}"
     "{%- set content = content.split('</think>')[-1] -%}{%- endif -%}"
     "{{ '<｜Assistant｜>' + content }}"
     "{%- if message.tool_calls is defined -%}{{ '<｜tool▁calls▁begin｜>' }}{%- for tc in message.tool_calls -%}"
     "{{ '<｜tool▁call▁begin｜>function<｜tool▁sep｜>' + tc.function.name + '\\n```json\\n' + (tc.function.arguments | tojson) + "
     "'\\n```<｜tool▁call▁end｜>' }}{%- endfor -%}{{ '<｜tool▁calls▁end｜>' }}{%- endif -%}"
     "{{ '<｜end▁of▁sentence｜>' }}{%- endif -%}{%- endfor -%}"
     "{%- if add_generation_prompt -%}{{ '<｜Assistant｜><think>\\n' }}{%- endif -%}"},
};

std::string token_text(const GgufFile& file, const char* id_key) {
  const auto id = file.get_int(id_key);
  const GgufValue* tokens = file.find("tokenizer.ggml.tokens");
  if (!id || !tokens || tokens->type != GgufValueType::ARRAY) return "";
  const auto& items = tokens->as_array().items;
  if (*id < 0 || static_cast<size_t>(*id) >= items.size()) return "";
  return items[static_cast<size_t>(*id)].as_string();
}

}  // namespace

const char* builtin_chat_template(const std::string& name) {
  for (const auto& b : kBuiltins)
    if (name == b.name) return b.source;
  return nullptr;
}

const char* builtin_chat_template_names() { return "chatml, llama3, deepseek2, deepseek3, deepseek-r1"; }

ChatTemplate::ChatTemplate(std::string origin, std::string_view source, std::string bos_token, std::string eos_token)
    : origin_(std::move(origin)),
      source_(source),
      bos_(std::move(bos_token)),
      eos_(std::move(eos_token)),
      reasons_(source.find("<think>") != std::string_view::npos || source.find("</think>") != std::string_view::npos ||
               source.find("<|channel|>analysis") != std::string_view::npos ||  // harmony's reasoning channel
               source.find("[THINK]") != std::string_view::npos ||
               source.find("<|channel>thought") != std::string_view::npos),  // Gemma 4's thought channel
      reasoning_tags_(reasoning_tags_of(source)),
      tool_format_(detect_tool_call_format(source)) {
  try {
    template_ = std::make_shared<const jinja::Template>(source);
  } catch (const jinja::TemplateError& e) {
    throw Error(fmt::format("chat template ({}) does not parse: {}", origin_, e.what()));
  }
}

ChatTemplate ChatTemplate::from_model(const GgufFile& file, const std::string& choice) {
  const std::string bos = token_text(file, "tokenizer.ggml.bos_token_id");
  const std::string eos = token_text(file, "tokenizer.ggml.eos_token_id");
  if (choice.empty()) {
    if (const auto src = file.get_string("tokenizer.chat_template")) return {"tokenizer.chat_template", *src, bos, eos};
    ChatTemplate t("built-in chatml (the model file has no tokenizer.chat_template)", kBuiltins[0].source, bos, eos);
    t.fallback_ = true;
    return t;
  }
  if (const char* src = builtin_chat_template(choice)) return {"built-in " + choice, src, bos, eos};
  if (const auto src = file.get_string("tokenizer.chat_template." + choice))
    return {"tokenizer.chat_template." + choice, *src, bos, eos};
  if (std::filesystem::is_regular_file(choice)) return {"file " + choice, read_whole_file(choice, "chat template file"), bos, eos};
  throw Error(fmt::format("--chat-template '{}' is not a file, a built-in template ({}) or a template of the model ({})",
                          choice, builtin_chat_template_names(),
                          [&] {
                            std::string names;
                            for (const auto& [k, v] : file.metadata())
                              if (k.rfind("tokenizer.chat_template.", 0) == 0)
                                names += (names.empty() ? "" : ", ") + k.substr(24);
                            return names.empty() ? std::string("it has no named ones") : names;
                          }()));
}

void ChatTemplate::set_default_kwargs(const nlohmann::ordered_json& kwargs) {
  if (!kwargs.is_object()) throw Error("chat template kwargs must be a JSON object");
  default_kwargs_ = kwargs;
}

std::vector<int32_t> ChatTemplate::tokenize(const Tokenizer& tokenizer, const RenderedChat& rendered,
                                            bool special_in_content) const {
  const bool bos_in_text = !bos_.empty() && rendered.text.rfind(bos_, 0) == 0;
  return special_in_content ? tokenizer.encode(rendered.text, !bos_in_text, true)
                            : tokenizer.encode(rendered.text, !bos_in_text, rendered.content);
}

jinja::TaintedString ChatTemplate::render_vars(const nlohmann::ordered_json& vars,
                                               const jinja::RenderOptions& options) const {
  jinja::ValueDict dict;
  for (const auto& [k, v] : vars.items()) dict.emplace_back(k, jinja::from_json(v, false));
  const auto absent = [&](const char* key) { return !vars.contains(key); };
  if (absent("bos_token")) dict.emplace_back("bos_token", jinja::Value(bos_));
  if (absent("eos_token")) dict.emplace_back("eos_token", jinja::Value(eos_));
  return template_->render(dict, options);
}

RenderedChat ChatTemplate::render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                  const nlohmann::ordered_json& kwargs, bool add_generation_prompt) const {
  jinja::ValueDict dict = {
      {"messages", jinja::from_json(messages, true)},
      {"tools", jinja::from_json(tools, true)},
      {"add_generation_prompt", jinja::Value(add_generation_prompt)},
      {"bos_token", jinja::Value(bos_)},
      {"eos_token", jinja::Value(eos_)},
  };
  const auto set = [&](const std::string& k, jinja::Value v) {
    for (auto& [name, x] : dict)
      if (name == k) {
        x = std::move(v);
        return;
      }
    dict.emplace_back(k, std::move(v));
  };
  // Template switches are the operator's or the client's choice, not message text.
  for (const auto& [k, v] : default_kwargs_.items()) set(k, jinja::from_json(v, false));
  for (const auto& [k, v] : kwargs.items()) set(k, jinja::from_json(v, false));
  jinja::TaintedString out = template_->render(dict, {});
  return {std::move(out.text), std::move(out.input)};
}

}  // namespace kestrel

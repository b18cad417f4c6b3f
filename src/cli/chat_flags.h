#pragma once
// The chat-template flags of the commands that chat (serve, chat): kept out of
// commands.h so that every other subcommand compiles without nlohmann/json.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"

namespace kestrel::cli {

// --chat-template FILE|NAME and --chat-template-kwargs JSON (serve, chat).
inline void add_chat_template_options(CLI::App* cmd, std::string& choice, std::string& kwargs) {
  cmd->add_option("--chat-template", choice,
                  "A Jinja chat template file, a built-in (chatml, llama3, deepseek2, deepseek3, deepseek-r1), or "
                  "the name of one of the model's templates (tokenizer.chat_template.NAME); default: the model's");
  cmd->add_option("--chat-template-kwargs", kwargs,
                  "JSON object of extra template variables, e.g. '{\"enable_thinking\": false}' (requests may "
                  "override them with chat_template_kwargs)");
}

// The --chat-template-kwargs text as a JSON object; throws Error saying what is wrong.
inline nlohmann::ordered_json parse_chat_template_kwargs(const std::string& text) {
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw kestrel::Error(fmt::format("--chat-template-kwargs is not JSON: {}", e.what()));
  }
  if (!j.is_object()) throw kestrel::Error("--chat-template-kwargs must be a JSON object");
  return j;
}

}  // namespace kestrel::cli

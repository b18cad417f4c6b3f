// kestrel template (-m MODEL | --template FILE) --vars FILE.json: render a
// chat template exactly as the server would, nothing added.
#include <cstdio>

#include "cli/commands.h"
#include "core/read_file.h"
#include "jinja/json_value.h"
#include "runtime/loaded_model.h"
#include "chat/chat_template.h"

namespace kestrel::cli {

void register_template(CLI::App& app) {
  static std::string model, template_file, template_name, vars_file, now;
  auto* cmd = add_command(app, "template", "Render a chat template with variables from a JSON file", [] {
    if (model.empty() == template_file.empty()) throw Error("give one of -m MODEL or --template FILE");
    nlohmann::ordered_json vars;
    try {
      vars = nlohmann::ordered_json::parse(read_whole_file(vars_file, "--vars file"));
    } catch (const nlohmann::json::exception& e) {
      throw Error(fmt::format("--vars '{}' is not JSON: {}", vars_file, e.what()));
    }
    if (!vars.is_object()) throw Error(fmt::format("--vars '{}' must hold a JSON object of template variables", vars_file));
    ChatTemplate tmpl = template_file.empty()
                            ? ChatTemplate::from_model(*open_model_file(model, ""), template_name)
                            : ChatTemplate("file " + template_file, read_whole_file(template_file, "--template file"));
    if (tmpl.used_fallback()) fmt::print(stderr, "[kestrel] {} has no chat template: rendering chatml\n", model);
    jinja::RenderOptions options;
    if (!now.empty()) options.now = jinja::parse_wall_time(now);
    const std::string text = tmpl.render_vars(vars, options).text;
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  });
  cmd->add_option("-m,--model", model, "GGUF model whose tokenizer.chat_template is rendered");
  cmd->add_option("--template", template_file, "A Jinja chat template file");
  cmd->add_option("--template-name", template_name,
                  "With -m: the named template tokenizer.chat_template.NAME (e.g. tool_use), or a built-in name");
  cmd->add_option("--vars", vars_file,
                  "JSON object of the template's variables (messages, tools, add_generation_prompt, bos_token, "
                  "eos_token, ...); with -m, bos_token/eos_token default to the model's")
      ->required();
  cmd->add_option("--now", now, "The time strftime_now() formats, e.g. 2026-01-15T10:30:00 (default: the local time)");
}

}  // namespace kestrel::cli

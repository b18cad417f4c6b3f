#include "cli/commands.h"

#include <map>

namespace kestrel::cli {

static std::map<CLI::App*, Action>& actions() {
  static std::map<CLI::App*, Action> a;
  return a;
}

CLI::App* add_command(CLI::App& app, const std::string& name, const std::string& help, Action action) {
  CLI::App* sub = app.add_subcommand(name, help);
  actions()[sub] = std::move(action);
  return sub;
}

int run_selected(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands()) {
    auto it = actions().find(sub);
    if (it != actions().end()) return it->second();
  }
  return 1;
}

}  // namespace kestrel::cli

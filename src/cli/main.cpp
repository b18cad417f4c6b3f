// kestrel: one binary, one subcommand per file in this folder.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"Kestrel: a hardware-aware LLM inference engine"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "kestrel 0.1.0");
  kestrel::cli::register_all(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return kestrel::cli::run_selected(app);
  } catch (const kestrel::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

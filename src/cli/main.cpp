// kestrel: one binary, one subcommand per file in this folder.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "parallel/mpi_world.h"

int main(int argc, char** argv) {
  CLI::App app{"Kestrel: a hardware-aware LLM inference engine"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("kestrel ") + kestrel::cli::kVersion);
  kestrel::cli::register_all(app);
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    std::string names;
    for (const CLI::App* sub : app.get_subcommands({})) {
      known = known || sub->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      std::fprintf(stderr, "error: unknown command '%s' (commands: %s; see kestrel --help)\n", argv[1], names.c_str());
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  // Under mpirun (--parallel), every exit leaves the MPI job: cleanly, or by
  // aborting it when the ranks can no longer agree (a collective failed).
  try {
    const int rc = kestrel::cli::run_selected(app);
    kestrel::leave_mpi_world(rc, false);
    return rc;
  } catch (const kestrel::CommunicatorFailure& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    kestrel::leave_mpi_world(1, true);
    return 1;
  } catch (const kestrel::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    kestrel::leave_mpi_world(1, false);
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    kestrel::leave_mpi_world(1, true);
    return 1;
  }
}

// kestrel probe [--path /ready]: asks a running server on this machine whether it is alive or ready — the
// container image's HEALTHCHECK (a minimal image has no curl). Exit 0 on HTTP 200, 1 otherwise (the reason
// on stderr), so that a probe reads it as a shell command's status.
#include <httplib.h>

#include "cli/commands.h"

namespace kestrel::cli {
namespace {

struct ProbeFlags {
  std::string host = "127.0.0.1", path = "/health";
  int port = 8080;
  double timeout_s = 5;
};

int run(const ProbeFlags& f) {
  if (f.port < 1 || f.port > 65535) throw Error(fmt::format("--port {} is out of range (1 to 65535)", f.port));
  if (f.path.empty() || f.path[0] != '/') throw Error(fmt::format("--path '{}' must start with '/'", f.path));
  httplib::Client c(f.host, f.port);
  const auto whole = std::chrono::duration<double>(f.timeout_s);
  c.set_connection_timeout(std::chrono::duration_cast<std::chrono::microseconds>(whole));
  c.set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(whole));
  const auto r = c.Get(f.path);
  if (!r) {
    fmt::print(stderr, "kestrel probe: GET http://{}:{}{}: {}\n", f.host, f.port, f.path, httplib::to_string(r.error()));
    return 1;
  }
  fmt::print("{} {}\n", r->status, r->body);
  return r->status == 200 ? 0 : 1;
}

}  // namespace

void register_probe(CLI::App& app) {
  static ProbeFlags f;
  auto* cmd = add_command(app, "probe", "Ask a local server whether it is alive (/health) or ready (/ready): exit 0 on 200",
                          [] { return run(f); });
  cmd->add_option("--path", f.path, "/health (liveness) or /ready (readiness)")->capture_default_str();
  cmd->add_option("--host", f.host, "Server address")->capture_default_str();
  cmd->add_option("--port", f.port, "Server port")->capture_default_str()->envname("KESTREL_PORT");
  cmd->add_option("--timeout", f.timeout_s, "Seconds to wait for the answer")->capture_default_str();
}

}  // namespace kestrel::cli

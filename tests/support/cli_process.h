#pragma once
// The `kestrel` binary run once as a command, for end-to-end tests: its exit
// status, stdout and stderr (arguments shell-quoted; stdin is empty).
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "test_support.h"

namespace kestrel::test {

struct CliResult {
  int exit_code;
  std::string out, err;
};

// A shell command's output (stdout and stderr together) and, if asked, its exit status.
inline std::string shell(const std::string& cmd, int* status = nullptr) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  if (status) *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

// A file's sha256 (hex), by sha256sum; "" when it cannot be read.
inline std::string sha256_of(const std::string& path) {
  FILE* p = popen(("sha256sum '" + path + "'").c_str(), "r");
  if (!p) return "";
  char buf[65] = {};
  const size_t n = fread(buf, 1, 64, p);
  pclose(p);
  return std::string(buf, n);
}

// The ids `kestrel run --print-ids` printed after its last "ids:" (none: empty).
inline std::vector<int> printed_ids(const std::string& out) {
  std::vector<int> ids;
  const size_t at = out.rfind("ids:");
  if (at == std::string::npos) return ids;
  size_t i = at + 4;
  while (i < out.size()) {
    while (i < out.size() && out[i] == ' ') i++;
    if (i >= out.size() || (out[i] < '0' || out[i] > '9')) break;
    int v = 0;
    while (i < out.size() && out[i] >= '0' && out[i] <= '9') v = v * 10 + (out[i++] - '0');
    ids.push_back(v);
  }
  return ids;
}

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

inline CliResult run_kestrel(const std::vector<std::string>& args) {
  TempDir dir;
  std::string cmd = shell_quote(KESTREL_BINARY);
  for (const auto& a : args) {
    cmd += ' ';
    cmd += shell_quote(a);
  }
  cmd += " > " + dir.file("out") + " 2> " + dir.file("err") + " < /dev/null";
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128, read_text(dir.file("out")), read_text(dir.file("err"))};
}

// A random-weight Llama (synth preset tiny) with the stories vocabulary and a
// 2048-token context, written to path: room for long structured outputs.
inline std::string write_synth_stories_model(const std::string& path) {
  const CliResult r = run_kestrel({"synth", "--arch", "llama", "--preset", "tiny", "--ctx", "2048", "--vocab-from",
                                   shared("models/stories260K.gguf"), "-o", path});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return path;
}

}  // namespace kestrel::test

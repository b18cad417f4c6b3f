#pragma once
// `kestrel serve` as a real child process on loopback, for end-to-end tests
// (the server's own and loadtest's): started on a free port (read from its
// log), killed at the end of the test unless terminate() stopped it first.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "test_support.h"

namespace kestrel::test {

// A `kestrel serve` child process on a free port.
class ServerProcess {
 public:
  // env: "NAME=value" set in the child. wait_ready false: the constructor returns once the socket is bound
  // (the model may still be loading), not once the server serves.
  explicit ServerProcess(std::vector<std::string> args, std::vector<std::string> env = {}, bool wait_ready = true) {
    log_ = dir_.file("serve.log");
    args.insert(args.begin(), {KESTREL_BINARY, "serve", "--port", "0", "-t", "2"});
    pid_ = fork();
    if (pid_ == 0) {
      // The server dies with the test process, even one a sanitizer aborted
      // before this object's destructor could kill it.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() == 1) _exit(127);
      std::freopen(log_.c_str(), "w", stderr);
      std::freopen("/dev/null", "w", stdout);
      for (auto& e : env) putenv(e.data());
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    // The port is printed once the socket is bound ("listening on"), and again once the model is loaded and
    // every route is in place ("serving ... on"): the test starts then.
    const std::regex re(wait_ready ? "serving '[^\\n]*' on https?://127\\.0\\.0\\.1:([0-9]+)"
                                   : "listening on https?://127\\.0\\.0\\.1:([0-9]+)");
    for (int i = 0; i < 200 && port_ == 0; i++) {
      std::smatch m;
      std::ifstream f(log_);  // the child may not have created it yet
      const std::string log((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      if (std::regex_search(log, m, re))
        port_ = std::stoi(m[1]);
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (port_ == 0) ADD_FAILURE() << "server did not start: " << log();
  }
  // Whether the child has exited (its status in *status); it is reaped then.
  bool exited(int* status = nullptr) {
    int st = 0;
    if (pid_ <= 0 || waitpid(pid_, &st, WNOHANG) != pid_) return pid_ <= 0;
    pid_ = -1;
    if (status) *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
    return true;
  }
  ~ServerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60, 0);
    return c;
  }
  // SIGTERM, then the exit status (or -1 if it did not exit within the timeout).
  int terminate(int timeout_ms) {
    kill(pid_, SIGTERM);
    for (int waited = 0; waited < timeout_ms; waited += 20) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }
  std::string log() const {
    std::ifstream f(log_);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }

 private:
  TempDir dir_;
  std::string log_;
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace kestrel::test

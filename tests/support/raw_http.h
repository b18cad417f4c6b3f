#pragma once
// Raw TCP to a local server, for what an HTTP client library will not send
// (malformed framing, half-sent heads, thousands of idle connections).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>

namespace kestrel::test {

// A connected socket to 127.0.0.1:port, or -1.
inline int connect_local(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

inline bool send_all(int fd, const std::string& bytes) {
  for (size_t at = 0; at < bytes.size();) {
    const ssize_t n = send(fd, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
    if (n <= 0) return false;
    at += static_cast<size_t>(n);
  }
  return true;
}

// Everything the peer sends until it closes or timeout_ms passes with nothing.
// `reset` is set when the connection ended by a reset rather than a close.
inline std::string read_until_close(int fd, int timeout_ms, bool* reset = nullptr) {
  std::string out;
  char buf[65536];
  if (reset) *reset = false;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) break;
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n < 0 && reset) *reset = errno == ECONNRESET;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// Sends bytes on a new connection and returns what comes back until close.
inline std::string raw_exchange(int port, const std::string& bytes, int timeout_ms = 5000) {
  const int fd = connect_local(port);
  if (fd < 0) return "<connect failed>";
  send_all(fd, bytes);
  std::string out = read_until_close(fd, timeout_ms);
  close(fd);
  return out;
}

// The status code of a raw response ("HTTP/1.1 400 ..." -> 400), or 0.
inline int status_of(const std::string& response) {
  if (response.rfind("HTTP/1.", 0) != 0 || response.size() < 12) return 0;
  return std::atoi(response.c_str() + 9);
}

// Resident memory of a process, in bytes (VmRSS).
inline int64_t resident_bytes(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  while (f >> key) {
    if (key == "VmRSS:") {
      int64_t kb = 0;
      f >> kb;
      return kb * 1024;
    }
    f.ignore(1 << 20, '\n');
  }
  return -1;
}

// This process may open `n` descriptors (raises the soft limit if it can).
inline bool allow_open_files(rlim_t n) {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return false;
  if (r.rlim_cur >= n) return true;
  r.rlim_cur = std::min(r.rlim_max, n);
  return setrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur >= n;
}

}  // namespace kestrel::test

#pragma once
// A progress line for long CLI jobs (quantize, imatrix): redrawn in place
// on a terminal, one line per tenth of the work when stderr is a file or a
// pipe (logs stay readable).
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace kestrel::cli {

class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total)
      : label_(std::move(label)), total_(total > 0 ? total : 1), tty_(isatty(fileno(stderr)) != 0),
        start_(std::chrono::steady_clock::now()) {}

  // `done` of total units finished; `what` names the latest.
  void update(int64_t done, const std::string& what) {
    const int tenth = static_cast<int>(10 * done / total_);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double eta = done > 0 ? s * static_cast<double>(total_ - done) / static_cast<double>(done) : 0;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * done / total_);
    const std::string line = fmt::format("{}: [{}{}] {}/{} {:.0f}s, ~{:.0f}s left  {}", label_, std::string(filled, '='),
                                         std::string(kWidth - filled, ' '), done, total_, s, eta, what);
    if (tty_) {
      fmt::print(stderr, "\r{:<110.110}", line);
      if (done >= total_) fmt::print(stderr, "\n");
    } else if (tenth != last_tenth_ || done >= total_) {
      fmt::print(stderr, "{}\n", line);
    }
    last_tenth_ = tenth;
    std::fflush(stderr);
  }

 private:
  std::string label_;
  int64_t total_;
  bool tty_;
  int last_tenth_ = -1;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace kestrel::cli

#include "loadtest/load_runner.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <mutex>
#include <random>
#include <thread>

#include "core/error.h"

namespace kestrel {

std::vector<double> arrival_times(int64_t n, double rate, double burstiness, uint64_t seed) {
  std::vector<double> t(static_cast<size_t>(n), 0.0);
  if (!(rate > 0) || std::isinf(rate)) return t;
  if (!(burstiness > 0)) throw Error(fmt::format("--burstiness {} must be positive", burstiness));
  // Gaps with mean 1/rate: gamma(shape = burstiness, scale = 1 / (rate * burstiness)).
  std::mt19937_64 rng(seed);
  std::gamma_distribution<double> gap(burstiness, 1.0 / (rate * burstiness));
  double at = 0;
  for (auto& x : t) {
    x = at;
    at += gap(rng);
  }
  return t;
}

RunResult run_load(const Endpoint& ep, const std::vector<PreparedRequest>& requests, const RunOptions& o,
                   const std::atomic<bool>& stop) {
  using Clock = std::chrono::steady_clock;
  const auto n = static_cast<int64_t>(requests.size());
  const bool closed = o.concurrency > 0;
  const int workers = closed ? o.concurrency : std::max(1, std::min<int>(o.max_concurrency, static_cast<int>(n)));
  if (workers > 4096) throw Error("at most 4096 concurrent clients");
  const std::vector<double> arrivals =
      closed ? std::vector<double>(n, 0.0) : arrival_times(n, o.request_rate, o.burstiness, o.seed);

  RunResult result;
  std::vector<RequestRecord> records(static_cast<size_t>(n));
  std::vector<char> sent(static_cast<size_t>(n), 0);
  std::atomic<int64_t> next{0};
  const auto start = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; w++)
    threads.emplace_back([&] {
      LoadClient client(ep, o.timeout_s);
      for (;;) {
        const int64_t i = next++;
        if (i >= n) return;
        // Open loop: wait for this request's arrival time (in small steps, so Ctrl-C is prompt).
        while (!stop && elapsed() < arrivals[static_cast<size_t>(i)] && elapsed() < o.max_duration_s)
          std::this_thread::sleep_for(std::chrono::milliseconds(
              std::clamp<int64_t>(static_cast<int64_t>((arrivals[static_cast<size_t>(i)] - elapsed()) * 1000), 1, 50)));
        if (stop || elapsed() >= o.max_duration_s) return;
        RequestRecord r = client.stream(o.path, requests[static_cast<size_t>(i)].body, start);
        r.index = i;
        r.priority = requests[static_cast<size_t>(i)].priority;
        records[static_cast<size_t>(i)] = std::move(r);
        sent[static_cast<size_t>(i)] = 1;
      }
    });
  for (auto& t : threads) t.join();
  result.duration_s = elapsed();
  result.interrupted = stop.load();
  for (int64_t i = 0; i < n; i++)
    if (sent[static_cast<size_t>(i)]) result.records.push_back(std::move(records[static_cast<size_t>(i)]));
  return result;
}

}  // namespace kestrel

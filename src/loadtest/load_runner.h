#pragma once
// Sends a workload: closed loop (a fixed number of clients, each sending its
// next request when the last one ends) or open loop (arrivals at R requests
// per second, Poisson or gamma-bursty, at most max_concurrency in flight).
// Bounded by the request count and a maximum duration; a stop flag (Ctrl-C)
// ends it early with what was measured so far.
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "loadtest/load_client.h"
#include "loadtest/workload.h"

namespace kestrel {

struct RunOptions {
  std::string path = "/v1/completions";
  int concurrency = 0;          // > 0: closed loop with this many clients
  double request_rate = 0;      // open loop: requests per second (0 or inf: all at once)
  double burstiness = 1.0;      // gamma shape of the gaps (1: Poisson)
  int max_concurrency = 256;    // open loop: requests in flight at most
  double max_duration_s = 600;  // no request starts after this
  double timeout_s = 60;        // per request
  uint64_t seed = 0;
};

struct RunResult {
  std::vector<RequestRecord> records;  // in index order; requests never sent are absent
  double duration_s = 0;
  bool interrupted = false;
};

RunResult run_load(const Endpoint& ep, const std::vector<PreparedRequest>& requests, const RunOptions& o,
                   const std::atomic<bool>& stop);

// Arrival offsets (seconds) for n open-loop requests; rate 0 or inf: all zero.
std::vector<double> arrival_times(int64_t n, double rate, double burstiness, uint64_t seed);

}  // namespace kestrel

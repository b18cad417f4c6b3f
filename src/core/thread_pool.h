#pragma once
// A fixed set of worker threads that run one job at a time. The caller is
// worker 0, so `-t 1` runs everything on the calling thread with no handoff.
// Workers spin briefly between jobs (a forward pass issues hundreds of short
// jobs back to back) and sleep on a condition variable when idle longer.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "core/function_ref.h"

namespace kestrel {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs job(thread_index, n_threads) on every thread and waits for all.
  void run(FunctionRef<void(int, int)> job);

  // Splits [0, n) into contiguous ranges, one per thread: fn(begin, end).
  void parallel_for(int64_t n, FunctionRef<void(int64_t, int64_t)> fn);

 private:
  void worker_loop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  const FunctionRef<void(int, int)>* job_ = nullptr;
  std::mutex mutex_;
  std::condition_variable wake_cv_;
  std::atomic<int> sleepers_{0};
};

}  // namespace kestrel

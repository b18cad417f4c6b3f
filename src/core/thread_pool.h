#pragma once
// A fixed set of worker threads that run one job at a time. The caller is
// worker 0, so `-t 1` runs everything on the calling thread with no handoff.
// Workers spin briefly between jobs (a forward pass issues hundreds of short
// jobs back to back) and sleep on a condition variable when idle longer.
#include <atomic>
#include <memory>
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
  // The same ranges, each taken in chunks (fn once per chunk) of half what is
  // left of it, down to a 1/chunks_per_thread share of a range; a thread done
  // with its own range goes on with the others' remaining chunks. For work
  // whose time per unit varies by core: on a shared machine one vCPU can run
  // 1.5x slower than the other, and a static split leaves the faster waiting
  // at the barrier (measured: the caller spinning 12-19% of a forward pass).
  void parallel_for_balanced(int64_t n, FunctionRef<void(int64_t, int64_t)> fn, int chunks_per_thread = 8);

 private:
  void worker_loop(int index);

  // A thread's range in parallel_for_balanced: chunks are claimed from `next` by its owner first, then by
  // threads done with theirs. One cache line each (several threads compare-and-swap `next`).
  struct alignas(64) Range {
    std::atomic<int64_t> next{0};
    int64_t end = 0;
  };
  int n_threads_;
  std::unique_ptr<Range[]> ranges_;  // n_threads_, allocated once: no allocation per call on the decode path
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

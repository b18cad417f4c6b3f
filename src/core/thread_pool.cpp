#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__)
#include <immintrin.h>
#define KESTREL_PAUSE() _mm_pause()
#else
#define KESTREL_PAUSE() std::this_thread::yield()
#endif

namespace kestrel {
namespace {
// A waiting thread pauses this many turns, then blocks. A wait that long means the thread it waits for
// is not running: the machine has more runnable threads than cores (two engines, a build, the test
// suite's parallel jobs). Spinning on would hold the core the awaited thread needs for the rest of the
// time slice, at every barrier of a forward pass: two 2-thread processes on 2 cores ran 30x slower than
// one alone (measured). Uncontended, a job's threads meet within far fewer pauses than this.
constexpr int kSpinIterations = 1000;
}  // namespace

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(std::max(1, n_threads)), ranges_(std::make_unique<Range[]>(static_cast<size_t>(n_threads_))) {
  for (int i = 1; i < n_threads_; i++) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_.store(true);
  }
  wake_cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    int spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen && !stop_.load(std::memory_order_relaxed)) {
      if (++spins < kSpinIterations) {
        KESTREL_PAUSE();
        continue;
      }
      std::unique_lock lock(mutex_);
      sleepers_.fetch_add(1);
      wake_cv_.wait(lock, [&] { return stop_.load() || generation_.load() != seen; });
      sleepers_.fetch_sub(1);
      break;
    }
    if (stop_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    (*job_)(index, n_threads_);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();  // the caller may block
  }
}

void ThreadPool::run(FunctionRef<void(int, int)> job) {
  if (n_threads_ == 1) {
    job(0, 1);
    return;
  }
  job_ = &job;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    // Publishing under the mutex means a worker about to sleep either sees
    // the new generation or is woken by the notify below.
    std::lock_guard lock(mutex_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  if (sleepers_.load() > 0) wake_cv_.notify_all();
  job(0, n_threads_);
  int spins = 0;
  for (int left; (left = pending_.load(std::memory_order_acquire)) != 0;) {
    if (++spins < kSpinIterations) {
      KESTREL_PAUSE();
    } else {
      pending_.wait(left, std::memory_order_acquire);  // woken by the last worker's notify
    }
  }
}

void ThreadPool::parallel_for(int64_t n, FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  const int nt = static_cast<int>(std::min<int64_t>(n_threads_, n));
  if (nt == 1) {  // one unit of work (e.g. one decode token): no wake-up, no barrier
    fn(0, n);
    return;
  }
  run([&](int ti, int) {
    if (ti >= nt) return;
    const int64_t begin = n * ti / nt, end = n * (ti + 1) / nt;
    fn(begin, end);
  });
}

void ThreadPool::parallel_for_balanced(int64_t n, FunctionRef<void(int64_t, int64_t)> fn, int chunks_per_thread) {
  if (n <= 0) return;
  const int nt = static_cast<int>(std::min<int64_t>(n_threads_, n));
  if (nt == 1) {
    fn(0, n);
    return;
  }
  // Claims halve what is left of a range, down to this: few calls while the threads keep pace, small
  // pieces to take over near the end.
  const int64_t min_chunk = std::max<int64_t>(1, n / (static_cast<int64_t>(nt) * std::max(1, chunks_per_thread)));
  for (int i = 0; i < nt; i++) {  // published to the workers by run()'s generation release
    ranges_[i].next.store(n * i / nt, std::memory_order_relaxed);
    ranges_[i].end = n * (i + 1) / nt;
  }
  run([&](int ti, int) {
    if (ti >= nt) return;
    // Its own range first (contiguous: the weights stream in order), then the next threads'.
    for (int k = 0; k < nt; k++) {
      Range& r = ranges_[(ti + k) % nt];
      int64_t begin = r.next.load(std::memory_order_relaxed);
      while (begin < r.end) {
        const int64_t size = std::max(min_chunk, (r.end - begin) / 2);
        if (!r.next.compare_exchange_weak(begin, begin + size, std::memory_order_relaxed)) continue;
        fn(begin, std::min(r.end, begin + size));
        begin = r.next.load(std::memory_order_relaxed);
      }
    }
  });
}

}  // namespace kestrel

#include "core/thread_pool.h"

#include <algorithm>

namespace kestrel {

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; i++) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int, int)>* job;
    {
      std::unique_lock lock(mutex_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    (*job)(index, n_threads_);
    {
      std::lock_guard lock(mutex_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }
}

void ThreadPool::run(const std::function<void(int, int)>& job) {
  if (n_threads_ == 1) {
    job(0, 1);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    job_ = &job;
    pending_ = n_threads_ - 1;
    ++generation_;
  }
  start_cv_.notify_all();
  job(0, n_threads_);
  std::unique_lock lock(mutex_);
  done_cv_.wait(lock, [&] { return pending_ == 0; });
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int nt = static_cast<int>(std::min<int64_t>(n_threads_, n));
  run([&](int ti, int) {
    if (ti >= nt) return;
    const int64_t begin = n * ti / nt, end = n * (ti + 1) / nt;
    fn(begin, end);
  });
}

}  // namespace kestrel

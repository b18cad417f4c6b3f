// ThreadPool's splits: every index exactly once, and parallel_for_balanced's
// stealing (a thread done with its range takes the rest of a slow one's); waits
// that block rather than spin; the default thread count.
#include <gtest/gtest.h>
#include <sched.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "runtime/loaded_model.h"

namespace kestrel {
namespace {

// How many times fn saw each index of [0, n).
template <typename Split>
std::vector<int> coverage(int64_t n, Split split) {
  std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
  split(n, [&](int64_t a, int64_t b) {
    ASSERT_LE(0, a);
    ASSERT_LT(a, b);
    ASSERT_LE(b, n);
    for (int64_t i = a; i < b; i++) seen[static_cast<size_t>(i)].fetch_add(1);
  });
  std::vector<int> out;
  for (auto& s : seen) out.push_back(s.load());
  return out;
}

TEST(ThreadPool, EverySplitCoversEachIndexOnce) {
  for (int threads : {1, 2, 3, 5})
    for (int64_t n : {0, 1, 2, 3, 7, 64, 100, 1001}) {
      ThreadPool pool(threads);
      const std::vector<int> once(static_cast<size_t>(n), 1);
      EXPECT_EQ(coverage(n, [&](int64_t m, auto fn) { pool.parallel_for(m, fn); }), once)
          << threads << " threads, n=" << n;
      for (int chunks : {1, 3, 8, 1000})
        EXPECT_EQ(coverage(n, [&](int64_t m, auto fn) { pool.parallel_for_balanced(m, fn, chunks); }), once)
            << threads << " threads, n=" << n << ", " << chunks << " chunks a thread";
    }
}

// The caller (thread 0) stalls in its first chunk until everything else is
// done: the worker must have taken the rest of the caller's range, or the
// wait times out and the test fails.
TEST(ThreadPool, BalancedSplitLetsAFreeThreadTakeASlowOnesChunks) {
  ThreadPool pool(2);
  constexpr int64_t n = 64;
  const auto caller = std::this_thread::get_id();
  std::atomic<int64_t> done{0}, taken_from_caller{0}, stalled{0};
  std::atomic<bool> first_call{true}, timed_out{false};
  pool.parallel_for_balanced(n, [&](int64_t a, int64_t b) {
    if (std::this_thread::get_id() == caller && first_call.exchange(false)) {
      stalled = b - a;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (done.load() < n - (b - a))
        if (std::chrono::steady_clock::now() > deadline) {
          timed_out = true;
          break;
        } else {
          std::this_thread::yield();
        }
    } else if (std::this_thread::get_id() != caller && a < n / 2) {
      taken_from_caller += b - a;
    }
    done += b - a;
  });
  EXPECT_FALSE(timed_out) << "the worker did not take the stalled caller's remaining chunks";
  EXPECT_EQ(done.load(), n);
  // The caller's range is [0, 32): the worker took all of it but the stalled first chunk.
  EXPECT_LT(stalled.load(), n / 2);
  EXPECT_EQ(taken_from_caller.load(), n / 2 - stalled.load());
}

double cpu_seconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// A caller whose workers are late (descheduled on a busy machine; here: asleep in their job) blocks rather
// than spinning: spinning held the core the late thread needed, and two 2-thread processes on 2 cores ran
// 30x slower than one. Both waits are timed in CPU, not wall time: 300 ms of waiting may cost a few ms.
TEST(ThreadPool, ThreadsWaitingForALateOneDoNotSpin) {
  ThreadPool pool(3);
  const double caller0 = cpu_seconds(CLOCK_THREAD_CPUTIME_ID), process0 = cpu_seconds(CLOCK_PROCESS_CPUTIME_ID);
  const auto wall0 = std::chrono::steady_clock::now();
  pool.run([&](int ti, int) {
    if (ti == 2) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  });
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  const double caller = cpu_seconds(CLOCK_THREAD_CPUTIME_ID) - caller0;
  const double process = cpu_seconds(CLOCK_PROCESS_CPUTIME_ID) - process0;
  EXPECT_GE(wall, 0.3);
  EXPECT_LT(caller, 0.05) << "the caller spun while a worker was late";
  EXPECT_LT(process, 0.1) << "the caller and the idle worker used " << process << " s of CPU in " << wall << " s";
}

// The default thread count: KESTREL_THREADS when set (a bad value named), else the CPUs this process may run on.
TEST(ThreadCount, FromTheEnvironmentOrTheCpusThisProcessMayUse) {
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  unsetenv("KESTREL_THREADS");
  EXPECT_EQ(default_thread_count(), CPU_COUNT(&set));
  setenv("KESTREL_THREADS", "3", 1);
  EXPECT_EQ(default_thread_count(), 3);
  for (const char* bad : {"0", "-2", "two", "4x", "5000"}) {
    setenv("KESTREL_THREADS", bad, 1);
    try {
      default_thread_count();
      ADD_FAILURE() << "KESTREL_THREADS=" << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("KESTREL_THREADS='") + bad + "'"), std::string::npos)
          << e.what();
    }
  }
  unsetenv("KESTREL_THREADS");
}

}  // namespace
}  // namespace kestrel

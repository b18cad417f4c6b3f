#pragma once
// The collectives a model split across processes needs, as an interface:
// the model (model/) sums its partial results through it without knowing
// the transport; parallel/ implements it over MPI. Every call is collective:
// all ranks make it, in the same order, with the same sizes.
//
// A peer that dies or stops answering must not hang the caller forever:
// implementations give up after their timeout and throw
// CommunicatorFailure; the job cannot go on after that (the other ranks are
// somewhere inside the same collective), so callers end it.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/error.h"

namespace kestrel {

class Profiler;

struct CommunicatorFailure : Error {
  using Error::Error;
};

// Time this rank spent blocked in all-reduces: a blocking call's whole
// duration, a started one's wait() (what compute did not hide).
struct AllReduceStats {
  int64_t calls = 0;
  int64_t bytes = 0;  // per rank, as sent
  double seconds = 0;
  int64_t overlapped_calls = 0;  // of calls, started non-blocking
  double overlapped_seconds = 0;  // their part of seconds (the exposed rest of their time)
  // The expert combine's exchanges instead (all-to-all, then all-gather):
  // rounds, bytes this rank sent, time blocked in them.
  int64_t exchanges = 0;
  int64_t exchange_bytes = 0;
  double exchange_seconds = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // x[0, n) = the sum over ranks of every rank's x[0, n), on every rank
  // (bitwise the same everywhere: ranks that route experts by it must agree).
  virtual void all_reduce_sum(float* x, int64_t n) = 0;
  // bytes[0, n) of rank `root` to every rank. With wait_forever, the call
  // waits without the timeout (a rank idling until the leader has work).
  virtual void broadcast(void* bytes, size_t n, int root, bool wait_forever = false) = 0;
  virtual int64_t all_reduce_min(int64_t v) = 0;
  // Point to point (pipeline stages): started at once, completed by wait()
  // (under the timeout). Messages between two ranks arrive in the order sent.
  using Request = int64_t;
  virtual Request start_send(const float* x, int64_t n, int dest) = 0;
  // broadcast started: bytes must stay untouched (the root's) or unread (the others') until wait().
  virtual Request start_broadcast(void* bytes, int64_t n, int root) = 0;
  virtual Request start_recv(float* x, int64_t n, int source) = 0;
  // all_reduce_sum started non-blocking: x must stay untouched until wait().
  virtual Request start_all_reduce_sum(float* x, int64_t n) = 0;
  // Unequal parts to every rank (an MoE layer's rows to the ranks that sum
  // them): to_each[r] floats of send, in rank order, go to rank r. The
  // counts travel first, then the data; after wait(), from_each[r] holds the
  // floats rank r sent, placed in rank order in recv. send, recv and
  // from_each must stay until then. Error when they would not fit
  // recv_capacity floats.
  virtual Request start_all_to_all(const float* send, const int64_t* to_each, float* recv, int64_t recv_capacity,
                                   int64_t* from_each) = 0;
  // Each rank's part of x to every rank, in place: rank r's counts[r]
  // floats start at the sum of the counts before r. Complete at wait().
  virtual Request start_all_gather(float* x, const int64_t* counts) = 0;
  virtual void wait(Request r) = 0;
  // Whether a started transfer has completed (moving it along); wait() must
  // still be called for it.
  virtual bool test(Request r) = 0;
  // Lets started transfers move on (MPI progresses them only inside its
  // calls): called between operators while a transfer is in flight.
  virtual void progress() = 0;
  // The ranks with the same color, as a communicator of their own, ranked
  // by key (collective over this one: every rank calls it). It counts into
  // this one's all_reduce_stats and records into its profiler. Collectives
  // on different communicators need not be started in the same order.
  virtual std::shared_ptr<Communicator> split(int color, int key) = 0;
  virtual AllReduceStats all_reduce_stats() const = 0;
  // Set: every transfer goes into the profile (its time in flight on the
  // communication track, the time this rank waited for it on its own).
  virtual void set_profiler(Profiler* profiler) = 0;
  // "MPI (Open MPI 4.1.4), 2 ranks": for logs.
  virtual std::string describe() const = 0;
  bool is_leader() const { return rank() == 0; }
};

}  // namespace kestrel

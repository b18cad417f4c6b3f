// The MPI communicator (Open MPI): collectives started non-blocking and
// polled against a deadline, so that a rank that died or hangs ends the job
// with an error instead of blocking the others forever.
#include "parallel/mpi_world.h"

#include "core/profiler.h"

#include <fmt/format.h>
#include <mpi.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <map>
#include <memory>
#include <vector>

namespace kestrel {
namespace {

bool joined = false;

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(double timeout_s, MPI_Comm base) : timeout_s_(timeout_s) {
    MPI_Comm_dup(base, &comm_);
    // Errors come back as codes (a dead peer under mpirun --enable-recovery)
    // instead of ending the process: this rank then reports them.
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(version, &len);
    std::string v(version, static_cast<size_t>(len));
    library_ = v.substr(0, v.find(','));  // "Open MPI v4.1.4"
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce_sum(float* x, int64_t n) override {
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t p0 = prof_ ? prof_->now_ns() : 0;
    for (int64_t done = 0; done < n;) {
      const int count = static_cast<int>(std::min<int64_t>(n - done, INT_MAX));
      MPI_Request req;
      const auto what = [&] { return fmt::format("an all-reduce of {} floats", n); };
      started(MPI_Iallreduce(MPI_IN_PLACE, x + done, count, MPI_FLOAT, MPI_SUM, comm_, &req), what);
      wait(req, what, false);
      done += count;
    }
    stats_->calls++;
    stats_->bytes += n * static_cast<int64_t>(sizeof(float));
    stats_->seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (prof_) {
      const int64_t p1 = prof_->now_ns();
      const double bytes = static_cast<double>(n) * sizeof(float);
      prof_->record({"all-reduce (blocking)", -1, p0, p1 - p0, bytes, 0, ""});
      prof_->record({"all-reduce", -1, p0, p1 - p0, bytes, 0, "communication"});
    }
  }

  void broadcast(void* bytes, size_t n, int root, bool wait_forever) override {
    for (size_t done = 0; done < n;) {
      const int count = static_cast<int>(std::min<size_t>(n - done, INT_MAX));
      MPI_Request req;
      const auto what = [&] { return fmt::format("a broadcast of {} bytes from rank {}", n, root); };
      started(MPI_Ibcast(static_cast<char*>(bytes) + done, count, MPI_BYTE, root, comm_, &req), what);
      wait(req, what, wait_forever);
      done += static_cast<size_t>(count);
    }
  }

  int64_t all_reduce_min(int64_t v) override {
    MPI_Request req;
    const auto what = [] { return std::string("an all-reduce (min)"); };
    started(MPI_Iallreduce(MPI_IN_PLACE, &v, 1, MPI_INT64_T, MPI_MIN, comm_, &req), what);
    wait(req, what, false);
    return v;
  }

  Request start_broadcast(void* bytes, int64_t n, int root) override {
    return start_transfer(Kind::Broadcast, n, root, [&](int count, MPI_Request* req) {
      return MPI_Ibcast(bytes, count, MPI_BYTE, root, comm_, req);
    });
  }
  Request start_send(const float* x, int64_t n, int dest) override {
    return start_transfer(Kind::Send, n, dest, [&](int count, MPI_Request* req) {
      return MPI_Isend(x, count, MPI_FLOAT, dest, kPipelineTag, comm_, req);
    });
  }
  Request start_recv(float* x, int64_t n, int source) override {
    return start_transfer(Kind::Receive, n, source, [&](int count, MPI_Request* req) {
      return MPI_Irecv(x, count, MPI_FLOAT, source, kPipelineTag, comm_, req);
    });
  }
  Request start_all_reduce_sum(float* x, int64_t n) override {
    const Request id = start_transfer(Kind::AllReduce, n, -1, [&](int count, MPI_Request* req) {
      return MPI_Iallreduce(MPI_IN_PLACE, x, count, MPI_FLOAT, MPI_SUM, comm_, req);
    });
    stats_->calls++;
    stats_->overlapped_calls++;
    stats_->bytes += n * static_cast<int64_t>(sizeof(float));
    return id;
  }

  // Two transfers chained: the counts (MPI_Ialltoall), then, once they are
  // in (progress() or wait() sees it), the rows (MPI_Ialltoallv). Nothing
  // here waits, so that the other ranks' lateness hides behind compute too.
  Request start_all_to_all(const float* send, const int64_t* to_each, float* recv, int64_t recv_capacity,
                           int64_t* from_each) override {
    Pending p;
    p.kind = Kind::AllToAll;
    auto a = std::make_unique<AllToAll>();
    a->send = send, a->recv = recv, a->capacity = recv_capacity, a->from_each = from_each;
    a->out.assign(to_each, to_each + size_);
    a->in.resize(static_cast<size_t>(size_));
    for (int64_t c : a->out) p.n += c;
    p.a2a = std::move(a);
    p.start_ns = prof_ ? prof_->now_ns() : 0;
    started(MPI_Ialltoall(p.a2a->out.data(), 1, MPI_INT64_T, p.a2a->in.data(), 1, MPI_INT64_T, comm_, &p.req),
            [] { return std::string("an all-to-all of counts"); });
    stats_->exchanges++;
    stats_->exchange_bytes += p.n * static_cast<int64_t>(sizeof(float));
    return track(std::move(p));
  }

  Request start_all_gather(float* x, const int64_t* counts) override {
    Pending p;
    p.kind = Kind::AllGather;
    p.layout.resize(2 * static_cast<size_t>(size_));  // counts, offsets: MPI reads them until it completes
    int* n = p.layout.data();
    int* at = n + size_;
    p.n = int_layout(counts, n, at, "an all-gather");
    p.start_ns = prof_ ? prof_->now_ns() : 0;
    started(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x, n, at, MPI_FLOAT, comm_, &p.req),
            [&] { return p.what(); });
    stats_->exchange_bytes += counts[rank_] * static_cast<int64_t>(sizeof(float)) * (size_ - 1);
    return track(std::move(p));
  }

  bool test(Request r) override {
    progress();
    auto it = pending_.find(r);
    if (it == pending_.end()) throw Error(fmt::format("rank {}: no pending transfer {}", rank_, r));
    const Pending& p = it->second;
    return p.req == MPI_REQUEST_NULL && (!p.a2a || p.a2a->counts_in);
  }

  void wait(Request r) override {
    auto it = pending_.find(r);
    if (it == pending_.end()) throw Error(fmt::format("rank {}: no pending transfer {}", rank_, r));
    Pending p = std::move(it->second);
    pending_.erase(it);
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t w0 = prof_ ? prof_->now_ns() : 0;
    const bool was_done = p.done_ns >= 0;
    wait(p.req, [&] { return p.what(); }, false);
    if (p.a2a && !p.a2a->counts_in) {  // then the rows
      post_all_to_all_rows(p);
      wait(p.req, [&] { return p.what(); }, false);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (p.kind == Kind::AllReduce) {
      stats_->seconds += s;
      stats_->overlapped_seconds += s;
    } else if (p.kind == Kind::AllToAll || p.kind == Kind::AllGather) {
      stats_->exchange_seconds += s;
    }
    if (prof_) {
      const int64_t w1 = prof_->now_ns(), done = was_done ? p.done_ns : w1;
      const std::string name = kind_name(p.kind);
      if (!was_done) prof_->record({"wait " + name, -1, w0, w1 - w0, p.bytes(), 0, ""});
      prof_->record({name, -1, p.start_ns, done - p.start_ns, p.bytes(), 0, "communication"});
    }
  }

  void set_profiler(Profiler* profiler) override { prof_ = profiler; }

  void progress() override {
    for (auto& [id, p] : pending_) {
      if (p.req == MPI_REQUEST_NULL) continue;  // done: MPI_Test set it so
      int done = 0;
      if (MPI_Test(&p.req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        throw CommunicatorFailure(fmt::format("rank {} of {}: {} failed: a rank has died", rank_, size_, p.what()));
      if (!done) continue;
      if (p.a2a && !p.a2a->counts_in) {
        post_all_to_all_rows(p);
        continue;
      }
      if (prof_) p.done_ns = prof_->now_ns();
    }
  }

  AllReduceStats all_reduce_stats() const override { return *stats_; }

  std::shared_ptr<Communicator> split(int color, int key) override {
    MPI_Comm part;
    if (MPI_Comm_split(comm_, color, key, &part) != MPI_SUCCESS)
      throw CommunicatorFailure(fmt::format("rank {} of {}: splitting the communicator failed", rank_, size_));
    auto c = std::make_shared<MpiCommunicator>(timeout_s_, part);
    c->stats_ = stats_;
    c->prof_ = prof_;
    MPI_Comm_free(&part);
    return c;
  }

  std::string describe() const override { return fmt::format("MPI ({}), {} ranks", library_, size_); }

 private:
  static constexpr int kPipelineTag = 17;
  enum class Kind { AllReduce, AllToAll, AllGather, Send, Receive, Broadcast };
  static const char* kind_name(Kind k) {
    return k == Kind::AllReduce   ? "all-reduce"
           : k == Kind::AllToAll  ? "all-to-all"
           : k == Kind::AllGather ? "all-gather"
           : k == Kind::Send      ? "send"
           : k == Kind::Broadcast ? "broadcast"
                                  : "receive";
  }
  // An all-to-all in flight: counts first, then rows.
  struct AllToAll {
    const float* send = nullptr;
    float* recv = nullptr;
    int64_t capacity = 0;
    int64_t* from_each = nullptr;
    std::vector<int64_t> out, in;  // floats to / from each rank
    std::vector<int> counts;       // the rows' counts and offsets (MPI reads them until they are in)
    bool counts_in = false;
  };
  // A started transfer; its description is written only for an error.
  struct Pending {
    MPI_Request req = MPI_REQUEST_NULL;
    Kind kind = Kind::AllReduce;
    int64_t n = 0;         // floats (a broadcast: bytes)
    int peer = -1;         // the other rank of a send or receive, a broadcast's root
    int64_t start_ns = 0;  // profiler clock
    int64_t done_ns = -1;  // when progress() saw it complete
    std::unique_ptr<AllToAll> a2a;  // an all-to-all's buffers and state
    std::vector<int> layout;        // an all-gather's counts and offsets
    double bytes() const { return static_cast<double>(n) * (kind == Kind::Broadcast ? 1 : sizeof(float)); }
    std::string what() const {
      if (kind == Kind::Broadcast) return fmt::format("a broadcast of {} bytes from rank {}", n, peer);
      if (kind != Kind::Send && kind != Kind::Receive) return fmt::format("an {} of {} floats", kind_name(kind), n);
      return fmt::format("a {} of {} floats {} rank {}", kind_name(kind), n, kind == Kind::Send ? "to" : "from", peer);
    }
  };
  // The counts of an all-to-all are in: post its rows.
  void post_all_to_all_rows(Pending& p) {
    AllToAll& a = *p.a2a;
    a.counts_in = true;
    std::copy(a.in.begin(), a.in.end(), a.from_each);
    a.counts.resize(4 * static_cast<size_t>(size_));  // MPI reads them until the rows are in
    int* send_counts = a.counts.data();
    int* send_offsets = send_counts + size_;
    int* recv_counts = send_offsets + size_;
    int* recv_offsets = recv_counts + size_;
    int_layout(a.out.data(), send_counts, send_offsets, "an all-to-all's rows out");
    const int64_t received = int_layout(a.in.data(), recv_counts, recv_offsets, "an all-to-all's rows in");
    if (received > a.capacity)
      throw Error(fmt::format("rank {}: an all-to-all receiving {} floats (room for {}) sending {}", rank_, received,
                              a.capacity, p.n));
    started(MPI_Ialltoallv(a.send, send_counts, send_offsets, MPI_FLOAT, a.recv, recv_counts, recv_offsets, MPI_FLOAT,
                           comm_, &p.req),
            [&] { return p.what(); });
  }

  // counts[0, size_) as MPI's int counts n and offsets at; their total.
  // Error naming `what` when the message would exceed INT_MAX floats.
  int64_t int_layout(const int64_t* counts, int* n, int* at, const char* what) const {
    int64_t total = 0;
    for (int r = 0; r < size_; r++) {
      if (total + counts[r] > INT_MAX)
        throw Error(fmt::format("rank {}: {} is too large for one message", rank_, what));
      n[r] = static_cast<int>(counts[r]);
      at[r] = static_cast<int>(total);
      total += counts[r];
    }
    return total;
  }

  // A started transfer, kept until wait(): its id.
  Request track(Pending p) {
    const Request id = next_request_++;
    pending_.emplace(id, std::move(p));
    return id;
  }

  template <class Start>
  Request start_transfer(Kind kind, int64_t n, int peer, Start start) {
    Pending p;
    p.kind = kind, p.n = n, p.peer = peer;
    if (n > INT_MAX) throw Error(fmt::format("rank {}: {} is too large for one message", rank_, p.what()));
    p.start_ns = prof_ ? prof_->now_ns() : 0;
    started(start(static_cast<int>(n), &p.req), [&] { return p.what(); });
    return track(std::move(p));
  }

  template <class What>
  void started(int rc, What what) const {
    if (rc != MPI_SUCCESS)
      throw CommunicatorFailure(fmt::format("rank {} of {}: {} could not start: a rank has died", rank_, size_, what()));
  }

  // Polls until the request completes: spinning at first (a step's
  // all-reduce takes microseconds), then yielding, then sleeping in short
  // naps, so that an idle rank waiting for work costs no core.
  template <class What>
  void wait(MPI_Request& req, What what, bool forever) {
    const auto start = std::chrono::steady_clock::now();
    for (int64_t polls = 0;; polls++) {
      int done = 0;
      if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        throw CommunicatorFailure(
            fmt::format("rank {} of {}: {} failed: a rank has died", rank_, size_, what()));
      if (done) return;
      if (polls < 2000) continue;
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (!forever && waited > timeout_s_)
        throw CommunicatorFailure(fmt::format(
            "rank {} of {}: {} did not complete within {:g} s: a rank has died or stopped answering "
            "(--parallel-timeout sets the limit)",
            rank_, size_, what(), timeout_s_));
      if (waited < 0.002) {
        sched_yield();
      } else {
        const timespec nap{0, waited < 0.1 ? 20'000 : 500'000};
        nanosleep(&nap, nullptr);
      }
    }
  }

  double timeout_s_;
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  std::string library_;
  // Shared with the communicators split from this one: a job's figures
  // include its tensor-parallel groups' and the expert exchanges'.
  std::shared_ptr<AllReduceStats> stats_ = std::make_shared<AllReduceStats>();
  std::map<Request, Pending> pending_;
  Profiler* prof_ = nullptr;
  Request next_request_ = 1;
};

}  // namespace

bool mpi_available() { return true; }

std::shared_ptr<Communicator> join_mpi_world(double timeout_s) {
  if (!(timeout_s > 0)) throw Error(fmt::format("--parallel-timeout {} must be positive", timeout_s));
  if (!joined) {
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
      throw Error("--parallel: MPI_Init failed (start kestrel with mpirun)");
    joined = true;
    if (provided < MPI_THREAD_SERIALIZED)
      throw Error("--parallel: this MPI library cannot be called from the server's engine thread "
                  "(MPI_THREAD_SERIALIZED not provided)");
  }
  return std::make_shared<MpiCommunicator>(timeout_s, MPI_COMM_WORLD);
}

void leave_mpi_world(int code, bool failed) {
  if (!joined) return;
  joined = false;
  if (failed) {
    // Not MPI_Abort: once mpirun is already ending the job (a rank died) it
    // can wait for the abort indefinitely. A rank that exits non-zero
    // without finalizing makes mpirun end the others by itself.
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(code == 0 ? 1 : code);
  }
  MPI_Finalize();
}

}  // namespace kestrel

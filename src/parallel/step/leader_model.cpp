#include "parallel/step/leader_model.h"

#include <fmt/format.h>

#include <cstdio>

#include "core/error.h"
#include "parallel/step/step_message.h"

namespace kestrel {
namespace {

class LeaderModel final : public Model {
 public:
  LeaderModel(std::unique_ptr<Model> inner, std::shared_ptr<Communicator> comm, PagedKvCache& kv, bool pipeline_steps)
      : inner_(std::move(inner)), comm_(std::move(comm)), kv_(kv) {
    kv_.store().set_copy_log(&copies_);
    const int slots = pipeline_steps ? inner_->steps_in_flight() : 1;
    slots_.resize(static_cast<size_t>(slots));
  }
  ~LeaderModel() override {
    kv_.store().set_copy_log(nullptr);
    if (failed_) return;  // the others are not listening; the job is being aborted
    try {
      // Steps still in flight (their requests ended) go through first: the
      // other ranks are in them, and their rows come back into our buffers.
      for (;;) {
        int oldest = -1;
        for (size_t i = 0; i < slots_.size(); i++)
          if (slots_[i].started > 0 && (oldest < 0 || slots_[i].started < slots_[static_cast<size_t>(oldest)].started))
            oldest = static_cast<int>(i);
        if (oldest < 0) break;
        finish_forward(oldest, nullptr);
      }
      StepHeader h{static_cast<int64_t>(StepOp::Stop), 0};
      comm_->broadcast(&h, sizeof h, 0);
    } catch (const Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
    }
  }

  const ModelConfig& config() const override { return inner_->config(); }
  KvLayout kv_layout() const override { return inner_->kv_layout(); }
  int64_t max_batch_tokens() const override { return inner_->max_batch_tokens(); }
  int64_t hidden_dim() const override { return inner_->hidden_dim(); }

  void forward(const Batch& b, const BatchPlacement& place, KvStore& kv, float* logits, float* hidden) override {
    check_cache(kv);
    if (b.size() == 0) return;
    if (b.size() > max_batch_tokens())
      throw Error(fmt::format("batch of {} tokens exceeds the planned maximum {}", b.size(), max_batch_tokens()));
    // Placed (and checked) by the caller before anything is sent: a bad
    // batch is an error there and the other ranks never see it.
    const std::vector<uint8_t> bytes = encode_step(b, place, kv_.n_groups(), kv_.block_size(), copies_);
    guarded([&] {
      StepHeader h{static_cast<int64_t>(StepOp::Forward), static_cast<int64_t>(bytes.size())};
      comm_->broadcast(&h, sizeof h, 0);
      comm_->broadcast(const_cast<uint8_t*>(bytes.data()), bytes.size(), 0);
      copies_.clear();
      inner_->forward(b, place, kv, logits, hidden);
    });
  }

  // Pipelining across steps: the step's message is broadcast without
  // waiting (the later stages are still busy with the step before) and
  // stage 0's part runs; finish waits for the rest and computes the logits.
  int steps_in_flight() const override { return static_cast<int>(slots_.size()); }

  void start_forward(const Batch& b, const BatchPlacement& place, KvStore& kv, int slot) override {
    check_cache(kv);
    Slot& s = slot_at(slot);
    if (b.size() == 0 || b.size() > max_batch_tokens())
      throw Error(fmt::format("batch of {} tokens: 1 to {} can be started", b.size(), max_batch_tokens()));
    s.bytes = encode_step(b, place, kv_.n_groups(), kv_.block_size(), copies_);
    s.header = {static_cast<int64_t>(StepOp::Forward), static_cast<int64_t>(s.bytes.size())};
    guarded([&] {
      s.message[0] = comm_->start_broadcast(&s.header, sizeof s.header, 0);
      s.message[1] = comm_->start_broadcast(s.bytes.data(), static_cast<int64_t>(s.bytes.size()), 0);
      copies_.clear();
      inner_->start_forward(b, place, kv, slot);
    });
    s.started = ++steps_started_;
  }

  void finish_forward(int slot, float* logits) override {
    Slot& s = slot_at(slot);
    if (s.started == 0) throw Error(fmt::format("step slot {} has no step in flight", slot));
    s.started = 0;  // (free again whatever happens next: the end must not drain it twice)
    guarded([&] {
      for (auto r : s.message) comm_->wait(r);
      inner_->finish_forward(slot, logits);
    });
  }

 private:
  // A communicator failure leaves the other ranks unreachable: remembered, so that the end sends nothing.
  template <class F>
  void guarded(F f) {
    try {
      f();
    } catch (const CommunicatorFailure&) {
      failed_ = true;
      throw;
    }
  }

  void check_cache(const KvStore& kv) const {
    if (&kv != &kv_.store()) throw Error("tensor parallelism: a forward step over a KV cache the other ranks do not hold");
  }

  struct Slot {  // a step in flight: its message, until finish
    StepHeader header;
    std::vector<uint8_t> bytes;
    Communicator::Request message[2] = {0, 0};
    int64_t started = 0;  // which step it is (counting from 1); 0: free
  };

  Slot& slot_at(int slot) {
    if (slot < 0 || slot >= steps_in_flight())
      throw Error(fmt::format("step slot {} out of range ({} in flight at most)", slot, steps_in_flight()));
    return slots_[static_cast<size_t>(slot)];
  }

  std::unique_ptr<Model> inner_;
  std::shared_ptr<Communicator> comm_;
  PagedKvCache& kv_;
  std::vector<Slot> slots_;
  int64_t steps_started_ = 0;
  std::vector<BlockCopy> copies_;  // the cache's copies since the last step
  bool failed_ = false;
};

}  // namespace

std::unique_ptr<Model> make_leader_model(std::unique_ptr<Model> inner, std::shared_ptr<Communicator> comm,
                                         PagedKvCache& kv, bool pipeline_steps) {
  return std::make_unique<LeaderModel>(std::move(inner), std::move(comm), kv, pipeline_steps);
}

}  // namespace kestrel

#include "parallel/leader_model.h"

#include <fmt/format.h>

#include <cstdio>

#include "core/error.h"
#include "model/batch_io.h"
#include "parallel/step_message.h"

namespace kestrel {
namespace {

class LeaderModel final : public Model {
 public:
  LeaderModel(std::unique_ptr<Model> inner, std::shared_ptr<Communicator> comm, PagedKvCache& kv)
      : inner_(std::move(inner)), comm_(std::move(comm)), kv_(kv), place_(inner_->max_batch_tokens()) {
    kv_.store().set_copy_log(&copies_);
  }
  ~LeaderModel() override {
    kv_.store().set_copy_log(nullptr);
    if (failed_) return;  // the others are not listening; the job is being aborted
    try {
      StepHeader h{static_cast<int64_t>(StepOp::Stop), 0};
      comm_->broadcast(&h, sizeof h, 0);
    } catch (const Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
    }
  }

  const ModelConfig& config() const override { return inner_->config(); }
  KvLayout kv_layout() const override { return inner_->kv_layout(); }
  int64_t max_batch_tokens() const override { return inner_->max_batch_tokens(); }

  void forward(const Batch& b, PagedKvCache& kv, float* logits, float* hidden) override {
    if (&kv != &kv_) throw Error("tensor parallelism: a forward step over a KV cache the other ranks do not hold");
    if (b.size() == 0) return;
    if (b.size() > max_batch_tokens())
      throw Error(fmt::format("batch of {} tokens exceeds the planned maximum {}", b.size(), max_batch_tokens()));
    // Checked and placed before anything is sent: a bad batch is an error
    // here and the other ranks never see it.
    place_batch(b, kv, config().n_vocab, place_);
    const std::vector<uint8_t> bytes = encode_step(b, place_, kv.n_groups(), kv.block_size(), copies_);
    try {
      StepHeader h{static_cast<int64_t>(StepOp::Forward), static_cast<int64_t>(bytes.size())};
      comm_->broadcast(&h, sizeof h, 0);
      comm_->broadcast(const_cast<uint8_t*>(bytes.data()), bytes.size(), 0);
      copies_.clear();
      inner_->forward_placed(b, place_, kv.store(), logits, hidden);
    } catch (const CommunicatorFailure&) {
      failed_ = true;
      throw;
    }
  }

 private:
  std::unique_ptr<Model> inner_;
  std::shared_ptr<Communicator> comm_;
  PagedKvCache& kv_;
  BatchPlacement place_;
  std::vector<BlockCopy> copies_;  // the cache's copies since the last step
  bool failed_ = false;
};

}  // namespace

std::unique_ptr<Model> make_leader_model(std::unique_ptr<Model> inner, std::shared_ptr<Communicator> comm,
                                         PagedKvCache& kv) {
  return std::make_unique<LeaderModel>(std::move(inner), std::move(comm), kv);
}

}  // namespace kestrel

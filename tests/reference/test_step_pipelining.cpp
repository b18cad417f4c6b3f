// Pipelining across steps (rank 0 under --parallel pp=P): the executor keeps
// up to the model's steps_in_flight() steps started, each over requests the
// others do not hold, and lands them in order. Checked here without MPI: a
// model that claims two slots and runs each step whole at its start must
// see disjoint requests in the two slots and FIFO landing, and every
// request must generate exactly what the one-step-at-a-time executor
// generates for it — also when one is cancelled while its step is in flight.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "runtime/loaded_model.h"
#include "runtime/step_executor.h"
#include "test_support.h"

namespace kestrel {
namespace {

// Two steps in flight over an ordinary model: start runs the step (in
// start order, as every stage of a pipeline does) and keeps its logits
// until finish.
class TwoInFlight final : public Model {
 public:
  explicit TwoInFlight(Model& inner) : inner_(inner) {}
  const ModelConfig& config() const override { return inner_.config(); }
  KvLayout kv_layout() const override { return inner_.kv_layout(); }
  int64_t max_batch_tokens() const override { return inner_.max_batch_tokens(); }
  void forward(const Batch&, const BatchPlacement&, KvStore&, float*, float*) override {
    ADD_FAILURE() << "with two slots, the executor starts and finishes steps";
  }
  int steps_in_flight() const override { return 2; }

  void start_forward(const Batch& b, const BatchPlacement& place, KvStore& kv, int slot) override {
    ASSERT_TRUE(slot == 0 || slot == 1);
    Slot& s = slots_[slot];
    ASSERT_FALSE(s.busy) << "slot " << slot << " started twice";
    const Slot& other = slots_[1 - slot];
    for (int32_t seq : b.seq_ids)
      EXPECT_FALSE(other.busy && other.seqs.count(seq)) << "sequence " << seq << " is in both steps in flight";
    s.seqs = std::set<int32_t>(b.seq_ids.begin(), b.seq_ids.end());
    s.logits.resize(static_cast<size_t>(b.n_logit_rows() * config().n_vocab));
    inner_.forward(b, place, kv, s.logits.data());
    s.busy = true;
    order_.push_back(slot);
    if (other.busy) overlapped++;
  }
  void finish_forward(int slot, float* logits) override {
    ASSERT_FALSE(order_.empty());
    EXPECT_EQ(order_.front(), slot) << "steps land in the order started";
    order_.erase(order_.begin());
    Slot& s = slots_[slot];
    ASSERT_TRUE(s.busy);
    std::copy(s.logits.begin(), s.logits.end(), logits);
    s.busy = false;
  }
  int overlapped = 0;  // steps started while the other slot's was in flight

 private:
  struct Slot {
    bool busy = false;
    std::set<int32_t> seqs;
    std::vector<float> logits;
  };
  Model& inner_;
  Slot slots_[2];
  std::vector<int> order_;
};

// What a caller keeps with a request (the server's client side), counted while it lives.
struct Tag : RequestAttachment {
  explicit Tag(int64_t request) : id(request) { live++; }
  ~Tag() override { live--; }
  int64_t id;
  static inline int live = 0;
};

// What each request generated, and which ended, from the steps' outputs; each end hands back the request's own
// attachment.
struct Collect {
  std::map<int64_t, std::vector<int32_t>> tokens;
  std::set<int64_t> ended;
  void read(const StepReport& rep) {
    for (const RequestOutput& out : rep) {
      for (const TokenOutput& t : out.tokens) tokens[out.id].push_back(t.token);
      if (!out.finished) continue;
      ended.insert(out.id);
      const auto* tag = dynamic_cast<const Tag*>(out.attachment.get());
      EXPECT_NE(tag, nullptr) << "request " << out.id << " ended without its attachment";
      if (tag) {
        EXPECT_EQ(tag->id, out.id);
      }
    }
  }
};

constexpr int kRequests = 5;

std::unique_ptr<Request> request(int i) {
  auto r = std::make_unique<Request>();
  r->id = i + 1;
  r->seq = i;
  for (int t = 0; t < 6 + 3 * i; t++) r->params.prompt.push_back(1 + (t * 13 + i * 7) % 500);
  r->params.sampling.temperature = 0.0f;
  r->params.max_tokens = 12 + 5 * i;  // they end at different steps
  r->params.ignore_eos = true;
  r->attachment = std::make_shared<Tag>(r->id);
  return r;
}

// Runs the requests to the end; cancel_id (if > 0) is removed after the
// first step that leaves it in flight. Returns what each generated.
std::map<int64_t, std::vector<int32_t>> generate(bool pipelined, int64_t cancel_id, int* overlapped = nullptr) {
  LoadOptions o = test::shared_engine("models/stories260K.gguf", 256);
  o.n_seq_max = kRequests;
  LoadedModel e = LoadedModel::load(o);
  std::unique_ptr<Model> inner;
  TwoInFlight* two = nullptr;
  if (pipelined) {
    inner = std::move(e.model);
    auto m = std::make_unique<TwoInFlight>(*inner);
    two = m.get();
    e.model = std::move(m);
  }
  ExecConfig xc;
  xc.scheduler.max_batch_size = kRequests;
  xc.scheduler.max_batch_tokens = e.model->max_batch_tokens();
  xc.scheduler.prefill_chunk = 16;  // prompts over several steps too
  StepExecutor exec(e, xc);
  Collect hooks;
  for (int i = 0; i < kRequests; i++) exec.add(request(i));
  bool cancelled = cancel_id <= 0;
  int reported = 0;  // steps the executor says it started with another in flight
  for (int step = 0; hooks.ended.size() + (cancelled && cancel_id > 0) < kRequests; step++) {
    EXPECT_LT(step, 500) << "the requests never end";
    if (step >= 500) break;
    const StepReport rep = exec.step(step);
    hooks.read(rep);
    EXPECT_TRUE(rep.ran);
    reported += rep.pipelined;
    if (!cancelled && exec.record(cancel_id) && exec.record(cancel_id)->in_flight && !hooks.tokens[cancel_id].empty()) {
      exec.remove(cancel_id);
      hooks.tokens.erase(cancel_id);
      cancelled = true;
    }
  }
  EXPECT_TRUE(cancelled) << "request " << cancel_id << " was never in flight after its first token";
  EXPECT_EQ(exec.n_running() + exec.n_waiting(), 0);
  EXPECT_EQ(e.kv->blocks().n_used_blocks(), 0) << "blocks still held";
  exec.step(500);  // nothing to run: the last ends' attachments are let go
  EXPECT_EQ(Tag::live, 0) << "attachments outlive their requests";
  EXPECT_EQ(reported, two ? two->overlapped : 0);
  if (overlapped) *overlapped = reported;
  return hooks.tokens;
}

TEST(StepPipelining, TwoStepsInFlightGenerateWhatOneAtATimeDoes) {
  const auto alone = generate(false, 0);
  ASSERT_EQ(alone.size(), static_cast<size_t>(kRequests));
  for (int i = 0; i < kRequests; i++) ASSERT_EQ(alone.at(i + 1).size(), static_cast<size_t>(request(i)->params.max_tokens));
  int overlapped = 0;
  const auto piped = generate(true, 0, &overlapped);
  EXPECT_EQ(piped, alone);
  // Most steps start while the other slot's is in flight (the last
  // request's tail runs alone: nothing else is left to pair it with).
  EXPECT_GT(overlapped, 20);
}

TEST(StepPipelining, ARequestCancelledInFlightLeavesTheOthersAlone) {
  const auto alone = generate(false, 0);
  auto piped = generate(true, 3);
  EXPECT_EQ(piped.count(3), 0u);
  auto expected = alone;
  expected.erase(3);
  EXPECT_EQ(piped, expected);
}

}  // namespace
}  // namespace kestrel

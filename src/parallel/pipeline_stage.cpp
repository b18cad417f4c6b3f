#include "parallel/pipeline_stage.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace kestrel {
namespace {

// The step's rows in micro-batches as even as they come: [first(m), first(m + 1)).
struct MicroBatches {
  int64_t n, count;
  MicroBatches(int64_t rows, int64_t wanted) : n(rows), count(std::max<int64_t>(1, std::min<int64_t>(rows, wanted))) {}
  int64_t first(int64_t m) const { return m * n / count; }
  int64_t rows(int64_t m) const { return first(m + 1) - first(m); }
};

// Rank 0's receives of the last stage's rows, micro-batch by micro-batch.
void post_returns(const TensorShard& shard, float* back, const MicroBatches& mb, int64_t dim,
                  std::vector<Communicator::Request>& into) {
  for (int64_t m = 0; m < mb.count; m++)
    into.push_back(
        shard.world->start_recv(back + mb.first(m) * dim, mb.rows(m) * dim, shard.rank_in_stage(shard.stages - 1)));
}

}  // namespace

void run_pipeline_stage(const TensorShard& shard, float* x, int64_t n, int64_t dim, int64_t micro_batches,
                        const RowsFn& embed, const RowsFn& layers) {
  Communicator& w = *shard.world;
  const int last = shard.stages - 1, stage = shard.stage;
  const MicroBatches mb(n, micro_batches);
  // The last stage's rank that rank 0 counts as its counterpart sends the rows back; its peers do not.
  const int next = stage < last ? shard.rank_in_stage(stage + 1) : shard.rank_in_stage(0) == 0 ? 0 : -1;
  std::vector<Communicator::Request> in, out;
  for (int64_t m = 0; m < mb.count && stage > 0; m++)
    in.push_back(w.start_recv(x + mb.first(m) * dim, mb.rows(m) * dim, shard.rank_in_stage(stage - 1)));
  for (int64_t m = 0; m < mb.count; m++) {
    if (stage == 0)
      embed(mb.first(m), mb.rows(m));
    else
      w.wait(in[static_cast<size_t>(m)]);
    layers(mb.first(m), mb.rows(m));
    if (next >= 0) out.push_back(w.start_send(x + mb.first(m) * dim, mb.rows(m) * dim, next));
  }
  for (auto r : out) w.wait(r);  // (rank 0: before its rows are overwritten by what comes back)
  if (!shard.leader()) return;
  in.clear();
  post_returns(shard, x, mb, dim, in);
  for (auto r : in) w.wait(r);
}

void start_first_stage(const TensorShard& shard, float* x, float* back, int64_t n, int64_t dim, int64_t micro_batches,
                       const RowsFn& embed, const RowsFn& layers, StageFlight& flight) {
  const MicroBatches mb(n, micro_batches);
  flight.sends.clear();
  flight.returns.clear();
  post_returns(shard, back, mb, dim, flight.returns);
  for (int64_t m = 0; m < mb.count; m++) {
    embed(mb.first(m), mb.rows(m));
    layers(mb.first(m), mb.rows(m));
    flight.sends.push_back(shard.world->start_send(x + mb.first(m) * dim, mb.rows(m) * dim, shard.rank_in_stage(1)));
  }
}

void finish_first_stage(const TensorShard& shard, StageFlight& flight) {
  for (auto r : flight.sends) shard.world->wait(r);
  for (auto r : flight.returns) shard.world->wait(r);
  flight.sends.clear();
  flight.returns.clear();
}

void StepSlots::resize(Backend& be, int slots, int64_t floats) {
  be_ = &be;
  slots_.resize(static_cast<size_t>(slots));
  floats_ = floats;
}

StepSlots::Slot& StepSlots::at(int slot) {
  if (slot < 0 || slot >= size())
    throw Error(fmt::format("step slot {} out of range (this rank keeps {} in flight)", slot, size()));
  return slots_[static_cast<size_t>(slot)];
}

void StepSlots::start(const TensorShard& shard, int slot, const Batch& b, int64_t rows, int64_t dim,
                      int64_t micro_batches, Act& x, const RowsFn& embed, const RowsFn& layers) {
  if (!shard.pipelined() || !shard.leader()) throw Error("only rank 0 of a pipeline keeps steps in flight");
  Slot& s = at(slot);
  if (s.batch) throw Error(fmt::format("step slot {} is still in flight", slot));
  s.x.ensure(*be_, floats_);
  s.back.ensure(*be_, floats_);
  const Act home = x;
  x = s.x;
  try {
    start_first_stage(shard, be_->map(s.x, floats_), be_->map(s.back, floats_), rows, dim, micro_batches, embed,
                      layers, s.flight);
  } catch (...) {
    x = home;
    throw;
  }
  x = home;
  s.batch = &b;  // in flight (only now: a step that failed to start leaves the slot free)
}

std::pair<const Batch*, Act> StepSlots::finish(const TensorShard& shard, int slot) {
  Slot& s = at(slot);
  if (!s.batch) throw Error(fmt::format("step slot {} has no step in flight", slot));
  const Batch* b = s.batch;
  s.batch = nullptr;  // (free again whatever happens next)
  finish_first_stage(shard, s.flight);
  return {b, s.back};
}

}  // namespace kestrel

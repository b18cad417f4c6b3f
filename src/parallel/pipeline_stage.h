#pragma once
// A pipeline stage's part of one step, shared by the models that split
// their layers over stages (--parallel pp=P): the step's rows go through in
// micro-batches, each received from the stage before (or embedded, on stage
// 0), run through this stage's layers and sent on while the next is
// computed; rank 0 finally receives every row's result from the last stage.
// Receives are posted before any send waits, so that no two stages can wait
// for each other.
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "parallel/tensor_shard.h"

namespace kestrel {

struct Batch;  // (model/batch.h: a slot only keeps the step's batch for whoever finishes it)

using RowsFn = std::function<void(int64_t r0, int64_t rows)>;

// x: the step's n rows of dim (the activations, in place). embed(r0, rows)
// fills rows on stage 0; layers(r0, rows) runs this stage's layers on them.
// With tensor and expert parallelism inside the stages, rank (stage, group,
// t) talks to rank (group, t) of the stages beside it (every rank of a
// stage holds the whole activations after its sums); only rank 0's
// counterpart in the last stage sends the rows back, to rank 0 alone.
void run_pipeline_stage(const TensorShard& shard, float* x, int64_t n, int64_t dim, int64_t micro_batches,
                        const RowsFn& embed, const RowsFn& layers);

// Rank 0 with several steps in flight (pipelining across steps): a step's
// stage-0 part started, its rows sent on and the receives of what the last
// stage sends back posted into `back` (n rows of dim, not x: x is still
// being sent); finish_first_stage waits for all of it. x and back must stay
// untouched until then — the next step in flight uses other buffers.
struct StageFlight {
  std::vector<Communicator::Request> sends, returns;
};
void start_first_stage(const TensorShard& shard, float* x, float* back, int64_t n, int64_t dim, int64_t micro_batches,
                       const RowsFn& embed, const RowsFn& layers, StageFlight& flight);
void finish_first_stage(const TensorShard& shard, StageFlight& flight);

// The steps rank 0 has in flight, one per slot, for a model whose layers
// work on its activations through a buffer handle: each slot has
// activations of its own (still being sent on while the next step computes)
// and a buffer for the rows that come back; allocated at the slot's first step.
class StepSlots {
 public:
  void resize(Backend& be, int slots, int64_t floats);
  int size() const { return static_cast<int>(slots_.size()); }
  // Starts b (rows of it) in slot: x is the slot's activations while embed
  // and layers run stage 0 (micro_batches of b's rows), then back where it
  // was. Error when the slot is out of range or still in flight.
  void start(const TensorShard& shard, int slot, const Batch& b, int64_t rows, int64_t dim, int64_t micro_batches,
             Act& x, const RowsFn& embed, const RowsFn& layers);
  // Waits for the slot's step; its batch and the rows that came back (for the head). The slot is free again.
  std::pair<const Batch*, Act> finish(const TensorShard& shard, int slot);

 private:
  struct Slot {
    ActBuffer x, back;
    StageFlight flight;
    const Batch* batch = nullptr;  // null: free
  };
  Slot& at(int slot);
  Backend* be_ = nullptr;
  std::vector<Slot> slots_;
  int64_t floats_ = 0;
};

}  // namespace kestrel

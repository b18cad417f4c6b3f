#include "parallel/step/follower.h"

#include "parallel/step/step_message.h"

namespace kestrel {

int64_t follow_leader(Model& model, KvStore& kv, Communicator& comm) {
  DecodedStep step;
  std::vector<uint8_t> bytes;
  for (int64_t steps = 0;; steps++) {
    StepHeader h;
    comm.broadcast(&h, sizeof h, 0, /*wait_forever=*/true);  // the leader may idle (a server without requests)
    if (h.op == static_cast<int64_t>(StepOp::Stop)) return steps;
    if (h.op != static_cast<int64_t>(StepOp::Forward) || h.payload_bytes < 0)
      throw CommunicatorFailure("tensor parallelism: the leader sent an unknown step");
    bytes.resize(static_cast<size_t>(h.payload_bytes));
    comm.broadcast(bytes.data(), bytes.size(), 0);
    decode_step(bytes, step);
    for (const BlockCopy& c : step.copies) {
      BlockCopies one;
      one.at[0] = c;
      one.n = 1;
      kv.copy(one);
    }
    model.forward(step.batch, step.place, kv, nullptr, nullptr);
  }
}

}  // namespace kestrel

#pragma once
// Ranks 1..N-1 of a tensor-parallel job: wait for the leader's next step,
// run this rank's share of it over this rank's KV rows, and again, until the
// leader says stop (its end) — or a collective times out (CommunicatorFailure).
#include "core/communicator.h"
#include "kv/kv_store.h"
#include "model/model.h"

namespace kestrel {

// Returns the number of steps run.
int64_t follow_leader(Model& model, KvStore& kv, Communicator& comm);

}  // namespace kestrel

#pragma once
// Rank 0 of a tensor-parallel job: the Model the runtime sees. It places
// each batch in the (one, shared) KV ledger, tells the other ranks the step
// (parallel/step/step_message.h) and runs its own share; the ranks meet in the
// model's all-reduces. Everything above it — scheduler, sampler, server — is
// the single-process code.
#include <memory>

#include "core/communicator.h"
#include "model/model.h"

namespace kestrel {

// inner: this rank's share of the model. Every forward step must use kv
// (the engine's cache: the one the other ranks mirror). pipeline_steps: keep
// as many steps in flight as inner can (pipelining across steps under pp).
std::unique_ptr<Model> make_leader_model(std::unique_ptr<Model> inner, std::shared_ptr<Communicator> comm,
                                         PagedKvCache& kv, bool pipeline_steps);

}  // namespace kestrel

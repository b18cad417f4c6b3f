#pragma once
// The MPI job this process belongs to, when it was started by mpirun with
// --parallel. Built without MPI (no libopenmpi-dev), join_mpi_world says so.
#include <memory>

#include "core/communicator.h"

namespace kestrel {

// Whether MPI support was compiled in.
bool mpi_available();
// MPI_Init (once, with MPI_THREAD_SERIALIZED: the server's engine thread
// makes the calls) and a communicator over every rank of the job, whose
// collectives give up after timeout_s. Error when built without MPI.
std::shared_ptr<Communicator> join_mpi_world(double timeout_s);
// At exit: MPI_Finalize after a clean end; after a failure, _exit(code) (the
// other ranks may be waiting inside a collective that will never complete),
// which makes mpirun end every rank. No-op when the world was never joined.
void leave_mpi_world(int code, bool failed);

}  // namespace kestrel

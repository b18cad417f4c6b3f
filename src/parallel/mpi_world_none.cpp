// join_mpi_world without MPI: this build was configured without Open MPI.
#include "core/error.h"
#include "parallel/mpi_world.h"

namespace kestrel {

bool mpi_available() { return false; }

std::shared_ptr<Communicator> join_mpi_world(double) {
  throw Error("--parallel: this kestrel was built without MPI (install libopenmpi-dev and openmpi-bin, then rebuild)");
}

void leave_mpi_world(int, bool) {}

}  // namespace kestrel

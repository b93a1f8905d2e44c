// The build without Open MPI: data-parallel training says it is not built in.
#include <stdexcept>

#include "meganeura/distributed.h"

namespace meganeura {

bool distributed_built_in() { return false; }

std::unique_ptr<Communicator> make_mpi_communicator(const CommOptions&) {
  throw std::runtime_error(
      "data-parallel training is not built in: this build has no MPI (install Open MPI with `apt-get install "
      "libopenmpi-dev openmpi-bin` and rebuild)");
}

}  // namespace meganeura

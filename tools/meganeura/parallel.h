// What `meganeura train --data-parallel` adds around the Trainer: one device per rank, the
// launcher's signals forwarded to the communicator, the communication profile as JSON.
#pragma once

#include <nlohmann/json.hpp>

#include "meganeura/distributed.h"
#include "meganeura/session.h"

namespace meganeura::cli {

// The device of this rank: for `--device vulkan` or `auto` (no device named), the Vulkan device
// (GPUs first, for auto) at index local rank modulo their count; CPU threads are the machine's
// cores shared among the ranks on it. Returns a note for the banner ("" when nothing changed).
std::string place_rank(SessionOptions& o, const Communicator& comm);

// While alive, SIGTERM and SIGINT (mpirun ends the other ranks with SIGTERM when one dies)
// go to comm.interrupt(), which says which ranks still answer before the process ends.
class ForwardSignals {
 public:
  explicit ForwardSignals(Communicator& comm);
  ~ForwardSignals();
  ForwardSignals(const ForwardSignals&) = delete;
  ForwardSignals& operator=(const ForwardSignals&) = delete;
};

// Started by mpirun or srun as one of several processes (from the launcher's environment).
int launched_ranks();

// The profile's per-update communication, with the median update time over the updates after
// the first few (warm-up).
nlohmann::json comm_profile_json(const CommProfile& p);
// The same in one line on stderr.
void print_comm_profile(const CommProfile& p);

}  // namespace meganeura::cli

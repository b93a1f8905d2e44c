// Data-parallel training across processes and machines. Every rank builds the same training
// program and runs it on its own shard of each global batch; the gradients are averaged over
// the ranks before the optimizer runs, so every rank applies the identical update and holds
// bit-identical parameters. The ranks talk through a Communicator: Open MPI where this build
// found it (distributed_built_in()), launched with mpirun or srun.
//
// Usage: create one communicator per process, build the Trainer with
// DataParallelOptions{.comm = c.get()}, initialise or load the parameters on rank 0 and call
// broadcast_parameters(); then step as usual, each rank feeding its shard.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "meganeura/dtype.h"

namespace meganeura {

class Session;

// Every collective is bounded: one that has not completed after `timeout_s` asks every rank to
// answer within `roll_call_s`, then fails with an error naming the ranks that did not (dead,
// stopped or unreachable), never a hang.
struct CommOptions {
  double timeout_s = 300;
  double roll_call_s = 2;
};

// The ranks of a job and the collectives data-parallel training needs. Every rank must start
// the same collectives in the same order. Errors are std::runtime_error prefixed with
// "[distributed] rank R of N:".
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;  // among the ranks on this machine (chooses the device)
  virtual int local_size() const = 0;
  virtual std::string description() const = 0;  // e.g. "Open MPI v4.1.4, rank 0 of 2"

  using Ticket = uint64_t;
  // Starts summing `count` values (f32 or f64) at `data` over all ranks, in place; `what`
  // names the collective in errors ("gradient bucket 2 of 5, update 17").
  virtual Ticket start_sum(void* data, size_t count, DType dtype, const std::string& what) = 0;
  virtual Ticket start_broadcast(void* data, size_t bytes, int root, const std::string& what) = 0;
  // Waits for a started collective; throws when it failed or a rank was lost.
  virtual void wait(Ticket ticket) = 0;
  // One value from every rank, in rank order.
  virtual std::vector<uint64_t> all_gather(uint64_t value, const std::string& what) = 0;
  // Waits for every rank; while every rank still answers, waits past the timeout (the end of a
  // run, where rank 0 writes the checkpoint).
  virtual void barrier(const std::string& what) = 0;
  // Seconds so far with at least one collective in flight (communication time).
  virtual double busy_seconds() const = 0;

  // Ends the whole job with `code` after writing `message` (if any) to stderr: every rank
  // stops (MPI_Abort), never returns.
  [[noreturn]] virtual void abort(const std::string& message, int code) = 0;
  // Async-signal-safe: the launcher is ending this process with `signal`. The communicator
  // writes which ranks still answer and what it was doing, then ends the process with status
  // 128 + signal.
  virtual void interrupt(int signal) noexcept = 0;
};

// Whether this build has the MPI transport (Open MPI was found at build time).
bool distributed_built_in();
// Initialises MPI (one per process). Throws std::runtime_error saying the feature is not built
// in when distributed_built_in() is false.
std::unique_ptr<Communicator> make_mpi_communicator(const CommOptions& options = {});
// Rank 0 of 1, without MPI: the data-parallel code path in a single process.
std::unique_ptr<Communicator> make_single_communicator();

// Rank `root`'s parameters and states (optimizer moments, step counter, accumulators) to every
// rank, bit for bit. Call it after rank 0 initialised or loaded them.
void broadcast_parameters(Session& session, Communicator& comm, int root = 0);
// Compares a hash of every parameter and state across ranks; throws naming the ranks whose
// values differ from rank 0's.
void check_replicas(const Session& session, Communicator& comm, const std::string& when);

// Communication of a data-parallel Trainer, summed over its optimizer updates.
struct CommProfile {
  int ranks = 1;
  size_t buckets = 0;  // gradient buckets per update
  // Where the schedule starts each bucket: after this dispatch of the grad program's
  // `dispatches` (the rest of the backward pass runs while it is reduced), and its bytes.
  std::vector<uint32_t> bucket_ready;
  std::vector<uint64_t> bucket_bytes;
  uint32_t dispatches = 0;
  int64_t updates = 0;           // optimizer updates reduced
  double bytes = 0;              // gradient bytes reduced per rank, all updates
  double step_s = 0;             // wall time of the updates (forward, backward, reduction, optimizer)
  double compute_s = 0;          // of which running the grad program (forward and backward)
  double communication_s = 0;    // time with a reduction in flight (overlapping the backward pass)
  double exposed_s = 0;          // time the updates waited for reductions after their backward pass
  std::vector<double> update_s;  // wall time of each update, in order
};

}  // namespace meganeura

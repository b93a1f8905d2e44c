// The data-parallel side of a Trainer: runs the grad program, starts each bucket's sum as the
// program completes it, waits, averages, and times it all.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "distributed/buckets.h"
#include "meganeura/distributed.h"
#include "meganeura/session.h"
#include "meganeura/train.h"

namespace meganeura::distributed {

class GradientReducer {
 public:
  // `gradients`: the external buffers of `grad_program` that hold the gradients (outputs, or
  // accumulators); `graphs_hash`: of the grad and apply graphs, compared across ranks first.
  // Collective: every rank constructs its reducer at the same point.
  GradientReducer(Session& session, size_t grad_program, std::vector<std::string> gradients,
                  const DataParallelOptions& options, uint64_t graphs_hash);

  // Runs the grad program; on the last micro-step of an update (`reduce`) sums the gradients
  // over the ranks and divides them by the rank count. Returns the micro-batch loss averaged
  // over the ranks.
  float run(bool reduce);
  // After the update's apply program: timing, and the replica check when due.
  void updated();
  CommProfile profile() const { return profile_; }

 private:
  void check_agreement(uint64_t graphs_hash) const;
  BucketLayout shared_layout(uint64_t cap_bytes) const;
  void start_bucket(size_t k, bool with_loss);
  void start_loss_only();
  void finish(bool reduced);
  std::byte* bucket_data(size_t k) { return reinterpret_cast<std::byte*>(pack_.data()) + pack_offset_[k]; }

  Session& session_;
  size_t program_;
  std::vector<std::string> gradients_;
  DataParallelOptions options_;
  Communicator& comm_;
  DType dtype_ = DType::f32;
  std::vector<Bucket> buckets_;
  uint32_t loss_ready_ = 0;            // the dispatch that completes "loss"
  std::vector<double> pack_;           // every bucket back to back (8-byte aligned), plus the loss
  std::vector<uint64_t> pack_offset_;  // bytes, per bucket
  std::vector<Communicator::Ticket> tickets_;
  bool in_update_ = false;
  std::chrono::steady_clock::time_point update_start_;
  double busy_start_ = 0;
  CommProfile profile_;
};

}  // namespace meganeura::distributed

#include "distributed/reducer.h"

#include <cmath>
#include <span>
#include <stdexcept>

#include "distributed/ranks.h"
#include "graph/op_table.h"

namespace meganeura::distributed {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
uint64_t round8(uint64_t n) { return (n + 7) / 8 * 8; }

std::string hex(uint64_t v) {
  char s[19];
  std::snprintf(s, sizeof s, "%016llx", static_cast<unsigned long long>(v));
  return s;
}

template <class T>
void scale(std::byte* data, uint64_t bytes, double factor) {
  T* v = reinterpret_cast<T*>(data);
  const T f = T(factor);
  for (uint64_t i = 0; i < bytes / sizeof(T); ++i) v[i] *= f;
}

}  // namespace

GradientReducer::GradientReducer(Session& session, size_t grad_program, std::vector<std::string> gradients,
                                 const DataParallelOptions& options, uint64_t graphs_hash)
    : session_(session),
      program_(grad_program),
      gradients_(std::move(gradients)),
      options_(options),
      comm_(*options.comm) {
  if (!std::isfinite(options.bucket_mb) || options.bucket_mb <= 0)
    throw std::invalid_argument("[distributed] the bucket size must be a positive number of MB, got " +
                                std::to_string(options.bucket_mb));
  const Program& p = session.program(grad_program);
  dtype_ = p.float_dtype;
  for (const std::string& g : gradients_) {
    const ExternalBuffer* e = p.external(g);
    if (!e || e->stored != dtype_) {
      throw std::invalid_argument("[distributed] gradient '" + g + "' is not stored as " +
                                  std::string(dtype_name(dtype_)) + "; only f32 and f64 gradients are reduced");
    }
  }
  check_agreement(graphs_hash);
  const auto cap = std::max<uint64_t>(1, uint64_t(options.bucket_mb * 1048576.0));
  buckets_ = make_buckets(p, gradients_, shared_layout(cap));
  loss_ready_ = completion_dispatch(p, "loss");
  uint64_t offset = 0;
  for (size_t k = 0; k < buckets_.size(); ++k) {
    pack_offset_.push_back(offset);
    // The last bucket carries the micro-batch loss after its gradients.
    offset += round8(buckets_[k].bytes + (k + 1 == buckets_.size() ? dtype_size(dtype_) : 0));
  }
  pack_.resize(offset / 8);
  profile_.ranks = comm_.size();
  profile_.buckets = buckets_.size();
  profile_.dispatches = uint32_t(p.dispatches.size());
  for (const Bucket& b : buckets_) {
    profile_.bucket_ready.push_back(b.ready_after);
    profile_.bucket_bytes.push_back(b.bytes);
  }
}

void GradientReducer::check_agreement(uint64_t graphs_hash) const {
  const std::vector<uint64_t> graphs = comm_.all_gather(graphs_hash, "the training-graph check");
  if (auto ranks = differing_ranks(graphs); !ranks.empty()) {
    throw std::runtime_error(rank_prefix(comm_) + "rank(s) " + rank_list(ranks) +
                             " built a different training graph than rank 0 (" + hex(graphs[ranks[0]]) + " on rank " +
                             std::to_string(ranks[0]) + ", " + hex(graphs[0]) +
                             " on rank 0): every rank must build the same model, batch and optimizer");
  }
  const uint64_t mine = fnv1a(std::to_string(options_.agreement) + "/" + std::to_string(options_.bucket_mb));
  const std::vector<uint64_t> runs = comm_.all_gather(mine, "the run-options check");
  if (auto ranks = differing_ranks(runs); !ranks.empty()) {
    throw std::runtime_error(rank_prefix(comm_) + "rank(s) " + rank_list(ranks) +
                             " run with different options than rank 0 (data seed, steps or bucket size)");
  }
}

BucketLayout GradientReducer::shared_layout(uint64_t cap_bytes) const {
  BucketLayout layout;
  if (comm_.rank() == 0) {
    layout = plan_layout(session_.program(program_), gradients_, cap_bytes);
  } else {
    layout.order.resize(gradients_.size());
    layout.starts.resize(gradients_.size());
  }
  const size_t bytes = gradients_.size() * sizeof(int32_t);
  const auto a = comm_.start_broadcast(layout.order.data(), bytes, 0, "the gradient bucket layout");
  const auto b = comm_.start_broadcast(layout.starts.data(), bytes, 0, "the gradient bucket layout");
  comm_.wait(a);
  comm_.wait(b);
  return layout;
}

void GradientReducer::start_bucket(size_t k, bool with_loss) {
  const Bucket& b = buckets_[k];
  std::byte* base = bucket_data(k);
  for (size_t i = 0; i < b.gradients.size(); ++i) {
    const uint64_t end = i + 1 < b.gradients.size() ? b.offsets[i + 1] : b.bytes;
    session_.read_raw(gradients_[b.gradients[i]], std::span<std::byte>(base + b.offsets[i], end - b.offsets[i]));
  }
  uint64_t bytes = b.bytes;
  if (with_loss) {
    session_.read_raw("loss", std::span<std::byte>(base + b.bytes, dtype_size(dtype_)));
    bytes += dtype_size(dtype_);
  }
  const std::string what = "gradient bucket " + std::to_string(k + 1) + " of " + std::to_string(buckets_.size()) +
                           " in update " + std::to_string(profile_.updates + 1) + " of this run";
  tickets_.push_back(comm_.start_sum(base, bytes / dtype_size(dtype_), dtype_, what));
}

void GradientReducer::start_loss_only() {
  std::byte* slot = bucket_data(buckets_.size() - 1) + buckets_.back().bytes;
  session_.read_raw("loss", std::span<std::byte>(slot, dtype_size(dtype_)));
  tickets_.push_back(comm_.start_sum(slot, 1, dtype_, "the loss of a micro-step"));
}

float GradientReducer::run(bool reduce) {
  if (!in_update_) {
    in_update_ = true;
    update_start_ = Clock::now();
    busy_start_ = comm_.busy_seconds();
  }
  std::vector<uint32_t> marks;
  if (reduce) {
    for (const Bucket& b : buckets_) marks.push_back(b.ready_after);
    marks.back() = std::max(marks.back(), loss_ready_);
  } else {
    marks.push_back(loss_ready_);
  }
  tickets_.clear();
  const auto started = Clock::now();
  session_.run(program_, marks, [&](size_t k) {
    if (reduce)
      start_bucket(k, k + 1 == buckets_.size());
    else
      start_loss_only();
  });
  const auto computed = Clock::now();
  profile_.compute_s += std::chrono::duration<double>(computed - started).count();
  for (Communicator::Ticket t : tickets_) comm_.wait(t);
  profile_.exposed_s += seconds_since(computed);
  finish(reduce);
  std::byte* slot = bucket_data(buckets_.size() - 1) + buckets_.back().bytes;
  return dtype_ == DType::f64 ? float(*reinterpret_cast<double*>(slot)) : *reinterpret_cast<float*>(slot);
}

void GradientReducer::finish(bool reduced) {
  // Every rank divides the same sums by the same count: identical gradients everywhere.
  const double inv = 1.0 / comm_.size();
  auto average = [&](std::byte* data, uint64_t bytes) {
    if (dtype_ == DType::f64)
      scale<double>(data, bytes, inv);
    else
      scale<float>(data, bytes, inv);
  };
  const size_t last = buckets_.size() - 1;
  average(bucket_data(last) + buckets_[last].bytes, dtype_size(dtype_));  // the loss
  if (!reduced) return;
  for (size_t k = 0; k < buckets_.size(); ++k) {
    const Bucket& b = buckets_[k];
    std::byte* base = bucket_data(k);
    average(base, b.bytes);
    for (size_t i = 0; i < b.gradients.size(); ++i) {
      const uint64_t end = i + 1 < b.gradients.size() ? b.offsets[i + 1] : b.bytes;
      session_.write_raw(gradients_[b.gradients[i]],
                         std::span<const std::byte>(base + b.offsets[i], end - b.offsets[i]));
    }
    profile_.bytes += double(b.bytes);
  }
}

void GradientReducer::updated() {
  in_update_ = false;
  const double step = seconds_since(update_start_);
  profile_.updates++;
  profile_.step_s += step;
  profile_.update_s.push_back(step);
  profile_.communication_s += comm_.busy_seconds() - busy_start_;
  const int every = options_.check_replicas_every;
  if (every > 0 && profile_.updates % every == 0)
    check_replicas(session_, comm_, "after update " + std::to_string(profile_.updates) + " of this run");
}

}  // namespace meganeura::distributed

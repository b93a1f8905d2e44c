// Where a data-parallel step reduces its gradients: buckets of gradients packed back to back,
// each reduced by one collective that starts once the grad program's dispatch order has
// written every gradient in it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meganeura/program.h"

namespace meganeura::distributed {

struct Bucket {
  std::vector<size_t> gradients;  // indices into the trainer's gradient list, in packing order
  std::vector<uint64_t> offsets;  // bytes into the bucket, per gradient
  uint64_t bytes = 0;
  uint32_t ready_after = 0;  // the dispatch after which every gradient of the bucket is final
};

// The dispatch after which external buffer `name` holds its final value: the last dispatch that
// writes it (the program's last dispatch when none does).
uint32_t completion_dispatch(const Program& p, const std::string& name);

// The layout every rank must share: gradient indices in the order the program completes them,
// and where each bucket starts in that order. Buckets close once they hold at least `cap_bytes`
// (so a gradient larger than the cap is a bucket of its own).
struct BucketLayout {
  std::vector<int32_t> order;   // gradient indices, completion order
  std::vector<int32_t> starts;  // per position in `order`: 1 where a bucket begins
};
BucketLayout plan_layout(const Program& p, const std::vector<std::string>& gradients, uint64_t cap_bytes);

// The buckets of `layout` with their ready points in `p` (this rank's program, which may order
// its dispatches differently from the rank that chose the layout). Ready points never decrease,
// since every rank starts the buckets' collectives in layout order.
std::vector<Bucket> make_buckets(const Program& p, const std::vector<std::string>& gradients,
                                 const BucketLayout& layout);

}  // namespace meganeura::distributed

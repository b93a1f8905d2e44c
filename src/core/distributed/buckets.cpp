#include "distributed/buckets.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace meganeura::distributed {
namespace {

const ExternalBuffer& external(const Program& p, const std::string& name) {
  const ExternalBuffer* e = p.external(name);
  if (!e) throw std::invalid_argument("[distributed] the grad program has no buffer '" + name + "'");
  return *e;
}

uint64_t bytes_of(const ExternalBuffer& e) { return storage_bytes(e.stored, e.type.numel()); }

}  // namespace

uint32_t completion_dispatch(const Program& p, const std::string& name) {
  for (size_t i = p.dispatches.size(); i-- > 0;) {
    for (uint32_t w : p.dispatches[i].writes) {
      if (p.tensors.at(w).binding == name) return uint32_t(i);
    }
  }
  return p.dispatches.empty() ? 0 : uint32_t(p.dispatches.size() - 1);
}

BucketLayout plan_layout(const Program& p, const std::vector<std::string>& gradients, uint64_t cap_bytes) {
  std::vector<uint32_t> done(gradients.size());
  for (size_t i = 0; i < gradients.size(); ++i) done[i] = completion_dispatch(p, gradients[i]);
  BucketLayout layout;
  layout.order.resize(gradients.size());
  std::iota(layout.order.begin(), layout.order.end(), 0);
  std::stable_sort(layout.order.begin(), layout.order.end(),
                   [&](int32_t a, int32_t b) { return done[size_t(a)] < done[size_t(b)]; });
  uint64_t filled = cap_bytes;  // the first gradient opens a bucket
  for (int32_t g : layout.order) {
    const bool open = filled >= cap_bytes;
    layout.starts.push_back(open ? 1 : 0);
    filled = (open ? 0 : filled) + bytes_of(external(p, gradients[size_t(g)]));
  }
  return layout;
}

std::vector<Bucket> make_buckets(const Program& p, const std::vector<std::string>& gradients,
                                 const BucketLayout& layout) {
  const size_t n = gradients.size();
  if (layout.order.size() != n || layout.starts.size() != n || (n && !layout.starts[0])) {
    throw std::invalid_argument("[distributed] a bucket layout of " + std::to_string(layout.order.size()) +
                                " gradients for a program with " + std::to_string(n));
  }
  std::vector<bool> seen(n);
  std::vector<Bucket> buckets;
  for (size_t k = 0; k < n; ++k) {
    const auto g = size_t(layout.order[k]);
    if (g >= n || seen[g]) throw std::invalid_argument("[distributed] the bucket layout is not a permutation");
    seen[g] = true;
    if (layout.starts[k]) buckets.emplace_back();
    Bucket& b = buckets.back();
    b.gradients.push_back(g);
    b.offsets.push_back(b.bytes);
    b.bytes += bytes_of(external(p, gradients[g]));
    b.ready_after = std::max(b.ready_after, completion_dispatch(p, gradients[g]));
  }
  for (size_t k = 1; k < buckets.size(); ++k)
    buckets[k].ready_after = std::max(buckets[k].ready_after, buckets[k - 1].ready_after);
  return buckets;
}

}  // namespace meganeura::distributed

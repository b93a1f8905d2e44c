// Barriers from read/write sets: a dispatch waits only when it reads bytes an unsynchronised
// earlier dispatch wrote (RAW), or writes bytes one read or wrote (WAR, WAW). The one place a
// planner's hazard list would replace.
#pragma once

#include <cstdint>
#include <vector>

namespace meganeura::vk {

struct ByteRange {
  uint32_t buffer = 0;  // backend-wide buffer id
  uint64_t lo = 0, hi = 0;
  bool overlaps(const ByteRange& o) const { return buffer == o.buffer && lo < o.hi && o.lo < hi; }
};

class HazardTracker {
 public:
  // True when a barrier must precede an access with these sets; `group` marks launches of one
  // dispatch that write disjoint elements of one tensor (concat) and so never conflict.
  bool needs_barrier(const std::vector<ByteRange>& reads, const ByteRange& write, uint32_t group) const {
    for (const auto& w : writes_) {
      if (w.overlaps(write) && w_group_(w) != group) return true;
      for (const auto& r : reads) if (w.overlaps(r)) return true;
    }
    for (const auto& r : reads_) if (r.overlaps(write)) return true;
    return false;
  }
  void add(const std::vector<ByteRange>& reads, const ByteRange& write, uint32_t group) {
    reads_.insert(reads_.end(), reads.begin(), reads.end());
    writes_.push_back(write);
    groups_.push_back(group);
  }
  void clear() {
    reads_.clear();
    writes_.clear();
    groups_.clear();
  }

 private:
  uint32_t w_group_(const ByteRange& w) const { return groups_[size_t(&w - writes_.data())]; }
  std::vector<ByteRange> reads_, writes_;
  std::vector<uint32_t> groups_;
};

}  // namespace meganeura::vk

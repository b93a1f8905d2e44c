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

// One access set per launch, in program order.
struct Access {
  std::vector<ByteRange> reads;
  ByteRange write;
  uint32_t group = 0;
};

inline bool conflicts(const Access& later, const Access& earlier) {
  if (later.write.overlaps(earlier.write) && later.group != earlier.group) return true;
  for (const auto& r : later.reads) if (r.overlaps(earlier.write)) return true;
  for (const auto& r : earlier.reads) if (r.overlaps(later.write)) return true;
  return false;
}

// Level of each launch: one more than the deepest earlier launch it conflicts with. Emitting
// launches level by level keeps every hazard ordered and needs one barrier per level, the
// fewest a full-pipeline barrier allows for this dependency graph.
inline std::vector<uint32_t> hazard_levels(const std::vector<Access>& a) {
  std::vector<uint32_t> level(a.size(), 0);
  for (size_t i = 0; i < a.size(); ++i) {
    for (size_t j = i; j-- > 0;) {
      if (level[j] + 1 > level[i] && conflicts(a[i], a[j])) level[i] = level[j] + 1;
    }
  }
  return level;
}

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
